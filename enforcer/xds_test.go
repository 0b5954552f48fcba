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
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/xds"
)

// TestXDSNACK: an enforcer with --xds rejects (NACKs) a snapshot it cannot load, with the
// error, and keeps serving; it applies a good one, and an update as a reload does (the counters
// of unchanged rules survive); a bad one after them leaves the good one serving.
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
	conn, err := grpc.NewClient(e.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	in := &instance{Enforcer: e, client: rlsv3.NewRateLimitServiceClient(conn)}
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

	serve := func(m *policy.Model) string {
		t.Helper()
		var buf bytes.Buffer
		if err := policy.WriteSnapshot(&buf, m); err != nil {
			t.Fatal(err)
		}
		v, _ := policy.ContentHash(m)
		if err := lc.UpdateResource(xds.SnapshotName, xds.SnapshotResource(buf.Bytes())); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "version "+v, func() bool { return e.ConfigVersion() == v })
		return v
	}
	serve(testModel())
	for range 3 {
		in.ask(t, "edge", []string{"stage=enforce", "user=keep"}) // spends the 3 tokens
	}
	// An update applies as a reload does: the counters of an unchanged rule survive it.
	m := testModel()
	m.Domains[0].Rules = append(m.Domains[0].Rules, testRule("added", 1, policy.Stage{Name: policy.StageEnforce}, policy.FailOpen))
	want := serve(m)
	if got := in.ask(t, "edge", []string{"stage=enforce", "user=keep"}).OverallCode; got != over {
		t.Errorf("unchanged rule after an update over xDS: got %v, want OVER_LIMIT (its counter survives)", got)
	}

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
