"""The Foo controller: reconciles each Foo into an nginx Deployment and reports status."""
