package controlplane_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/rlctl/rlctl/internal/clitest"
	"github.com/rlctl/rlctl/xds"
)

// TestMadeUpTypeURLs: a client that asks for types nobody serves gets an empty response for
// each, and the metrics label them "other": the pushes counter took the client's type URL as its
// label, so every made-up URL added a series without bound.
func TestMadeUpTypeURLs(t *testing.T) {
	const n = 50
	srv := startServer(t, policyCopy(t), "127.0.0.1:0")
	conn := dial(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		req := &discovery.DiscoveryRequest{Node: &core.Node{Id: "junk"}, VersionInfo: "x",
			TypeUrl: fmt.Sprintf("type.googleapis.com/junk.T%d", i)}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("response %d of %d: %v", i+1, n, err)
		}
		if len(resp.GetResources()) != 0 {
			t.Errorf("%s: %d resources, want none", resp.GetTypeUrl(), len(resp.GetResources()))
		}
	}
	// A response is counted after it is sent.
	var labels []string
	eventually(t, 5*time.Second, "the pushes counted", func() bool {
		var pushes float64
		labels, pushes = typeSeries(t, srv.AdminAddr())
		return pushes >= n
	})
	want := []string{"other", xds.RateLimitConfigTypeURL, xds.SnapshotTypeURL}
	if !slices.Equal(labels, want) {
		t.Errorf("type_url labels after %d made-up type URLs: got %d, want %v", n, len(labels), want)
	}
	if got := clitest.Metric(t, srv.AdminAddr(), `rlctl_xds_pushes_total{type_url="other"}`); got != n {
		t.Errorf(`rlctl_xds_pushes_total{type_url="other"}: %v, want %d`, got, n)
	}
}

// typeSeries reads the control plane's metrics: the values of their type_url label, sorted, each
// once, and the sum of rlctl_xds_pushes_total over its series.
func typeSeries(t *testing.T, addr string) (labels []string, pushes float64) {
	t.Helper()
	label := regexp.MustCompile(`^rlctl_xds_\w+\{.*type_url="([^"]*)".*\} (\S+)$`)
	for _, line := range strings.Split(clitest.MetricsPage(t, addr), "\n") {
		m := label.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if !slices.Contains(labels, m[1]) {
			labels = append(labels, m[1])
		}
		if strings.HasPrefix(line, "rlctl_xds_pushes_total{") {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			pushes += v
		}
	}
	slices.Sort(labels)
	return labels, pushes
}
