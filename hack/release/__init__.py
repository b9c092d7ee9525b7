"""What a release ships, and the files generated from the product that it ships with: the CRD,
the plain manifests, the image's SBOM, the kubectl plugin's archives, Artifact Hub's metadata.
`python -m hack.release` is the pipeline (pipeline.py)."""
