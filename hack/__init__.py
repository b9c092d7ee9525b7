"""Tooling around the product: the local plane it is tested on (`plane`), what a release ships
(`release`), and the dashboard's pictures (`pictures`); `hack/build.sh` builds what they run."""
