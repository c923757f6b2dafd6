"""The chains task: chains of operations whose every answer needs as many steps as it has."""
