package controlplane_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlctl/rlctl/enforcer"
	"github.com/rlctl/rlctl/internal/clitest"
	"github.com/rlctl/rlctl/xds/controlplane"
)

// The fleet (issue 12): fleetSize enforcers subscribed to one control plane; a limit edited in
// the policy must be served by all of them within fleetBound.
const (
	fleetSize  = 20
	fleetBound = 5 * time.Second
	// Requests to fleetDomain for tenant_id and a /catalog/ path hit fleetRule, 100 requests a
	// second in policies/tenants.cue.
	fleetDomain = "edge_gateway_limits"
	fleetFile   = "tenants.cue"
	fleetRule   = "tenant_catalog"
)

// fleetLimit is tenant_catalog's limit line in policies/tenants.cue, with n requests.
func fleetLimit(n int) string { return fmt.Sprintf(`limits: [{requests: %d, window: "1s"}]`, n) }

// TestXDSFleet runs a control plane over a copy of policies/ and fleetSize enforcers
// subscribed to it under light load, edits tenant_catalog's limit, and checks that every
// enforcer answers with the new limit within fleetBound, with no errors. Then it stops the
// control plane, edits the policy while it is away (the fleet keeps its limit), starts it again
// on the same port, and checks that they all resync to the edit; and that one more edit reaches
// them all as the first did. It prints the time from a write (or the restart) to the last enforcer answering with
// the new limit:
//
//	xds: enforcers=20 propagation_ms=N
//	xds: enforcers=20 resync_after_restart_ms=N
//	xds: enforcers=20 restarted=true propagation_ms=N
func TestXDSFleet(t *testing.T) {
	dir := policyCopy(t)
	addr := stableAddr(t) // the restart reuses it
	srv := startServer(t, dir, addr)

	fleet := make([]*member, fleetSize)
	for i := range fleet {
		fleet[i] = spawnMember(t, addr, i)
	}
	for _, m := range fleet {
		if !waitLimit(t, m, 100, 10*time.Second) {
			t.FailNow()
		}
	}
	load := startFleetLoad(t, fleet, 4)

	ms := editAndWait(t, dir, fleet, 100, 150)
	fmt.Printf("xds: enforcers=%d propagation_ms=%d\n", fleetSize, ms)

	// The control plane goes away: the fleet keeps serving its last snapshot, and a change
	// made meanwhile reaches every enforcer once it is back.
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	edit(t, dir, 150, 175)
	time.Sleep(300 * time.Millisecond)
	for _, m := range fleet {
		if got := limitOf(t, m); got != 150 {
			t.Fatalf("%s while the control plane is away: limit %d, want 150", m.id, got)
		}
	}
	restart := time.Now()
	srv = startServer(t, dir, addr)
	last := waitFleet(t, fleet, 175, restart)
	fmt.Printf("xds: enforcers=%d resync_after_restart_ms=%d\n", fleetSize, last)

	// Once they are all back on the stream, an edit reaches them as before.
	deadline := time.Now().Add(10 * time.Second)
	for clitest.Metric(t, srv.AdminAddr(), "rlctl_xds_connected_clients") != fleetSize {
		if time.Now().After(deadline) {
			t.Fatalf("connected clients after the restart: %v, want %d", clitest.Metric(t, srv.AdminAddr(), "rlctl_xds_connected_clients"), fleetSize)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ms = editAndWait(t, dir, fleet, 175, 200)
	fmt.Printf("xds: enforcers=%d restarted=true propagation_ms=%d\n", fleetSize, ms)

	n, errs, first := load.stop()
	if errs != 0 || n == 0 {
		t.Errorf("load: %d errors in %d calls, want none (first: %s)", errs, n, first)
	}
	t.Logf("load: %d calls", n)
}

// editAndWait changes tenant_catalog's limit from old to new requests a second in dir's
// tenants.cue and returns the milliseconds from the write until the last enforcer answered with
// the new limit.
func editAndWait(t *testing.T, dir string, fleet []*member, old, new int) int64 {
	t.Helper()
	return waitFleet(t, fleet, new, edit(t, dir, old, new))
}

// edit changes tenant_catalog's limit from old to new requests a second in dir's tenants.cue,
// as an editor saves (write a temporary file, rename it over), and returns the time of the
// rename.
func edit(t *testing.T, dir string, old, new int) time.Time {
	t.Helper()
	path := filepath.Join(dir, fleetFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	if strings.Count(src, fleetLimit(old)) != 1 {
		t.Fatalf("%s: no single %q to edit", fleetFile, fleetLimit(old))
	}
	tmp := filepath.Join(dir, "."+fleetFile+".swp")
	if err := os.WriteFile(tmp, []byte(strings.Replace(src, fleetLimit(old), fleetLimit(new), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return start
}

// waitFleet waits until every member answers with limit want, at most fleetBound after start,
// and returns the milliseconds from start until the last one did.
func waitFleet(t *testing.T, fleet []*member, want int, start time.Time) int64 {
	t.Helper()
	var wg sync.WaitGroup
	var last atomic.Int64
	for _, m := range fleet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if waitLimit(t, m, want, fleetBound-time.Since(start)) {
				d := time.Since(start).Milliseconds()
				for {
					l := last.Load()
					if d <= l || last.CompareAndSwap(l, d) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return last.Load()
}

// member is an in-process enforcer subscribed over xDS, and a client for it.
type member struct {
	id     string
	e      *enforcer.Enforcer
	client rlsv3.RateLimitServiceClient
}

func spawnMember(t *testing.T, xdsAddr string, i int) *member {
	t.Helper()
	id := fmt.Sprintf("gw-%02d", i)
	e, err := enforcer.Spawn(context.Background(), enforcer.Config{
		XDSAddr: xdsAddr, GRPCAddr: "127.0.0.1:0", AdminAddr: "off", InstanceID: id,
		Logger: slog.New(slog.NewJSONHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return &member{id: id, e: e, client: rlsv3.NewRateLimitServiceClient(dial(t, e.GRPCAddr()))}
}

// ask sends one tenant_catalog request for tenant.
func (m *member) ask(ctx context.Context, tenant string) (*rlsv3.RateLimitResponse, error) {
	return m.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: fleetDomain, Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant_id", Value: tenant}, {Key: "catalog", Value: "/catalog/"}},
	}}})
}

// limitOf is the requests per unit of the limit m answers with, 0 while it has no policy or
// does not answer within a second. It may run on a goroutine of its own (waitFleet), so it
// reports a wrong rule with Errorf.
func limitOf(t *testing.T, m *member) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := m.ask(ctx, "probe")
	if err != nil {
		return 0
	}
	if got := resp.GetStatuses()[0].GetCurrentLimit().GetName(); got != fleetRule {
		t.Errorf("%s: limit of rule %q, want %s", m.id, got, fleetRule)
		return 0
	}
	return int(resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
}

// waitLimit polls m until it answers with the limit want, up to d. It reports whether it did,
// and fails the test if not.
func waitLimit(t *testing.T, m *member, want int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	got := 0
	for time.Now().Before(deadline) {
		if got = limitOf(t, m); got == want {
			return true
		}
		if t.Failed() { // a wrong rule, already reported: waiting longer tells nothing more
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Errorf("%s: limit %d after %v, want %d", m.id, got, d, want)
	return false
}

// fleetLoad is light ShouldRateLimit traffic over the whole fleet.
type fleetLoad struct {
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	calls, errs atomic.Int64
	mu          sync.Mutex
	firstErr    string
}

// startFleetLoad sends requests to every member in turn from workers goroutines, about one a
// millisecond each, until stop, or until the test ends when it fails first: left running, the
// workers would call the closed members for the rest of the package.
func startFleetLoad(t *testing.T, fleet []*member, workers int) *fleetLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &fleetLoad{cancel: cancel}
	t.Cleanup(func() {
		cancel()
		l.wg.Wait()
	})
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				m := fleet[(i+w)%len(fleet)]
				_, err := m.ask(ctx, fmt.Sprintf("tenant-%d", i%50))
				if ctx.Err() != nil {
					return
				}
				l.calls.Add(1)
				if err != nil {
					if l.errs.Add(1) == 1 {
						l.mu.Lock()
						l.firstErr = m.id + ": " + err.Error()
						l.mu.Unlock()
					}
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return l
}

func (l *fleetLoad) stop() (calls, errs int64, first string) {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls.Load(), l.errs.Load(), l.firstErr
}

// dial connects to the gRPC server at addr (loopback, no TLS), closed when the test ends.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// startServer starts a control plane over dir at addr.
func startServer(t *testing.T, dir, addr string) *controlplane.Server {
	t.Helper()
	srv, err := controlplane.Start(context.Background(), controlplane.Config{PolicyDir: dir, Addr: addr, AdminAddr: "127.0.0.1:0",
		// Warnings only: under make test's -v, the fleet's figures should stand out.
		Logger: slog.New(slog.NewJSONHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// policyCopy copies the example policy repository's .cue files into a temporary directory.
func policyCopy(t *testing.T) string {
	t.Helper()
	src := filepath.Join("..", "..", "policies")
	names, err := filepath.Glob(filepath.Join(src, "*.cue"))
	if err != nil || len(names) == 0 {
		t.Fatalf("policies: %v (%d files)", err, len(names))
	}
	dir := t.TempDir()
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(n)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
