package enforcer

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/xds"
)

// TestXDSNACK: an enforcer with --xds rejects (NACKs) a snapshot it cannot load, with the
// error, and keeps serving; it applies a good one as a reload, and a bad one after it leaves the
// good one serving.
func TestXDSNACK(t *testing.T) {
	lc := cache.NewLinearCache(xds.SnapshotTypeURL)
	var mu sync.Mutex
	var nacks []string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := xdsserver.NewServer(ctx, lc, xdsserver.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			if r.GetErrorDetail() != nil {
				mu.Lock()
				nacks = append(nacks, r.GetErrorDetail().GetMessage())
				mu.Unlock()
			}
			return nil
		},
	})
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	defer g.Stop()
	nacked := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), nacks...)
	}
	bad := []byte(`{"schema_version": 1, "oops": true}`)
	if err := lc.UpdateResource(xds.SnapshotName, xds.SnapshotResource(bad)); err != nil {
		t.Fatal(err)
	}

	logs := &syncBuffer{}
	e, err := Spawn(context.Background(), Config{XDSAddr: ln.Addr().String(), GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		InstanceID: "t", Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	in := &instance{Enforcer: e}
	eventually(t, 5*time.Second, "a NACK", func() bool { return len(nacked()) == 1 })
	if got := nacked()[0]; !strings.Contains(got, "oops") {
		t.Errorf("NACK detail: %q, want the reason (the unknown field oops)", got)
	}
	if got := e.ConfigVersion(); got != "" {
		t.Errorf("version after a bad first snapshot: %q, want none", got)
	}
	if got := in.metric(t, `rate_limit_config_reloads_total{result="error"}`); got != 1 {
		t.Errorf("reload errors: %v, want 1", got)
	}

	var buf bytes.Buffer
	if err := policy.WriteSnapshot(&buf, testModel()); err != nil {
		t.Fatal(err)
	}
	want, _ := policy.ContentHash(testModel())
	if err := lc.UpdateResource(xds.SnapshotName, xds.SnapshotResource(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the good snapshot", func() bool { return e.ConfigVersion() == want })

	if err := lc.UpdateResource(xds.SnapshotName, xds.SnapshotResource(bad)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the second NACK", func() bool { return len(nacked()) == 2 })
	if got := e.ConfigVersion(); got != want {
		t.Errorf("version after a bad update: %s, want %s still serving", got, want)
	}
	if !strings.Contains(logs.String(), "config reload rejected") {
		t.Errorf("logs: no rejection line")
	}
}
