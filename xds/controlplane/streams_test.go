package controlplane

import (
	"context"
	"fmt"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/rlctl/rlctl/xds"
)

// TestStreamsKeepServedTypes: what was last sent on a stream is kept for the served types only,
// which a NACK can name; it was kept for every type URL a client asked for, so a client that
// made up URLs grew the map without bound for as long as its stream lived.
func TestStreamsKeepServedTypes(t *testing.T) {
	s := &Server{mx: newMetrics()}
	st := &streams{last: map[int64]map[string]sent{}}
	cb := s.callbacksOf(st)
	respond := func(typeURL string) {
		cb.OnStreamResponse(context.Background(), 1, &discovery.DiscoveryRequest{TypeUrl: typeURL},
			&discovery.DiscoveryResponse{TypeUrl: typeURL, VersionInfo: "v1", Nonce: "n"})
	}
	for i := range 100 {
		respond(fmt.Sprintf("type.googleapis.com/junk.T%d", i))
	}
	respond(xds.SnapshotTypeURL)
	if got := len(st.last[1]); got != 1 {
		t.Errorf("types kept for the stream after 100 made-up URLs and a served one: %d, want 1", got)
	}
	if got := st.last[1][xds.SnapshotTypeURL].version; got != "v1" {
		t.Errorf("the served type's last version: %q, want v1", got)
	}
}
