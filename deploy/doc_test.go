// Package deploy holds the tests of the deployment artifacts: the repository's Dockerfile, the
// Kubernetes example in kubernetes/ and the Grafana dashboard in grafana/. They check each
// artifact against the code it deploys (the enforcer's flags, defaults and metrics, the
// current render of policies/), so that none can drift from it silently. The package has no
// code of its own.
package deploy
