"""The architecture ablation: which switches make fixed-depth training collapse off depth."""
