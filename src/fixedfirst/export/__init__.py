"""Exporting a run for inference: fixedfirst's own directory format, and Hugging Face
`transformers` (`fixedfirst export --format hf`)."""
