package render

// EnvoyOptions are the envoy target's settings.
type EnvoyOptions struct {
	// ClusterName names the cluster of the rate limit service (the rlctl-enforcer sidecar);
	// default "rlctl_enforcer".
	ClusterName string
	// ClusterAddress is the sidecar's gRPC address, host:port; default "127.0.0.1:8081".
	ClusterAddress string
	// Bootstrap renders a complete static Envoy bootstrap instead of the filter, route and
	// cluster fragments.
	Bootstrap bool
}
