package enforcer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/metadata"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/internal/clitest"
	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/internal/redistest"
	"github.com/rlctl/rlctl/journal"
	"github.com/rlctl/rlctl/policy"
)

// TestReloadUnderLoad swaps the snapshot while requests flow: no errors, the new rule serves,
// the counters of an unchanged rule survive, and a bad file is rejected while the old config
// keeps serving.
func TestReloadUnderLoad(t *testing.T) {
	in := spawn(t, testModel(), func(c *Config) { c.JournalPath = t.TempDir() + "/journal.jsonl" })
	for range 3 {
		in.ask(t, "edge", []string{"stage=enforce", "user=keep"}) // spends the 3 tokens
	}
	l := startLoad(t, in, []string{"big", "open"}, 4)
	v1 := in.ConfigVersion()

	m := testModel()
	m.Domains[0].Rules = append(m.Domains[0].Rules, testRule("added", 1, policy.Stage{Name: policy.StageEnforce}, policy.FailOpen))
	writeSnapshot(t, in.path, m)
	eventually(t, 3*time.Second, "the new version", func() bool { return in.ConfigVersion() != v1 })
	if got := in.ask(t, "edge", []string{"stage=added", "user=a"}).Statuses[0].CurrentLimit.GetName(); got != "added" {
		t.Errorf("new rule: got limit %q, want added", got)
	}
	if got := in.ask(t, "edge", []string{"stage=enforce", "user=keep"}).OverallCode; got != over {
		t.Errorf("unchanged rule after reload: got %v, want OVER_LIMIT (its counter survives)", got)
	}

	if got := in.metric(t, `rate_limit_config_last_reload_successful`); got != 1 {
		t.Errorf("after good reloads: last reload successful %v, want 1", got)
	}
	v2 := in.ConfigVersion()
	if err := os.WriteFile(in.path, []byte(`{"schema_version": 1, "oops": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "the reload error metric", func() bool {
		return in.metric(t, `rate_limit_config_reloads_total{result="error"}`) >= 1
	})
	if got := in.ConfigVersion(); got != v2 {
		t.Errorf("after a bad file: version %s, want %s still serving", got, v2)
	}
	// The alert on a rejected file stays on while the file does.
	if got := in.metric(t, `rate_limit_config_last_reload_successful`); got != 0 {
		t.Errorf("after a bad file: last reload successful %v, want 0", got)
	}
	if !strings.Contains(in.logs.String(), "config reload rejected") {
		t.Errorf("logs: no rejection line")
	}
	_, _, _, n := l.finish()
	if got := l.errs.Load(); got != 0 || n == 0 {
		t.Errorf("gRPC errors during reloads: got %d of %d, want 0", got, n)
	}

	// The journal holds both config versions and the decisions.
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(in.conf.JournalPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := journal.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[journal.Kind]int{}
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		kinds[rec.Kind]++
	}
	if kinds[journal.KindConfig] != 2 || kinds[journal.KindDecision] < n || kinds[journal.KindStore] == 0 {
		t.Errorf("journal kinds: got %v, want 2 configs, ≥ %d decisions, some store replies", kinds, n)
	}
}

// TestConfigVersion: the version an enforcer serves is the snapshot's content hash, the one
// rlctl render writes and journal replays look policies up by.
func TestConfigVersion(t *testing.T) {
	m := testModel()
	in := spawn(t, m, nil)
	want, err := policy.ContentHash(testModel())
	if err != nil {
		t.Fatal(err)
	}
	if got := in.ConfigVersion(); got != want {
		t.Errorf("config version: got %s, want the content hash %s", got, want)
	}
}

// BenchmarkShouldRateLimit is the in-process hot path: a lease hit on one key (memory store).
func BenchmarkShouldRateLimit(b *testing.B) { benchShouldRateLimit(b, nil) }

// benchShouldRateLimit runs the hot path on an enforcer that mod configures.
// BenchmarkShouldRateLimitMetadata calls with the incoming metadata a real gRPC call carries (gRPC
// puts its headers there; the envoy target's filters add policy.FailureModeHeader), so that what
// the handler reads of it is measured.
func BenchmarkShouldRateLimitMetadata(b *testing.B) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(
		":authority", "127.0.0.1:8081", "content-type", "application/grpc", "user-agent", "envoy/1.36",
		"te", "trailers", "grpc-accept-encoding", "identity,deflate,gzip", "x-request-id", "4f1c",
		policy.FailureModeHeader, string(policy.FailOpen)))
	benchShouldRateLimitCtx(b, ctx)
}

// BenchmarkShouldRateLimitOverride is the hot path for a descriptor with a limit override: its
// limits are kept per rule (ruleState.override), not built for every request.
func BenchmarkShouldRateLimitOverride(b *testing.B) {
	benchShouldRateLimitReq(b, context.Background(), func(req *rlsv3.RateLimitRequest) {
		req.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 100_000_000, Unit: typev3.RateLimitUnit_SECOND}
	})
}

func benchShouldRateLimit(b *testing.B, mod func(*Config)) {
	benchShouldRateLimitCtx(b, context.Background(), mod)
}

func benchShouldRateLimitCtx(b *testing.B, ctx context.Context, mods ...func(*Config)) {
	var mod func(*Config)
	if len(mods) > 0 {
		mod = mods[0]
	}
	benchShouldRateLimitOn(b, ctx, mod, nil)
}

func benchShouldRateLimitReq(b *testing.B, ctx context.Context, reqMod func(*rlsv3.RateLimitRequest)) {
	benchShouldRateLimitOn(b, ctx, nil, reqMod)
}

// benchShouldRateLimitOn runs the hot path on an enforcer that mod configures, for one key's
// request that reqMod changes.
func benchShouldRateLimitOn(b *testing.B, ctx context.Context, mod func(*Config), reqMod func(*rlsv3.RateLimitRequest)) {
	m := testModel()
	m.Domains[0].Rules[7].Lease = policyfixture.Lease(policyfixture.Bounds(5, 500), policyfixture.TTL(10_000), policyfixture.UnsetWatermark())
	in := spawn(b, m, mod)
	svc := service{e: in.Enforcer}
	req := request("edge", []string{"stage=big", "user=hot"})
	if reqMod != nil {
		reqMod(req)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestWatchSkipsUnchangedPolicy rewrites the snapshot file as it was, which the watch sees as a
// change of the file but not of the policy: nothing is swapped in or counted. A changed policy
// written after it is.
func TestWatchSkipsUnchangedPolicy(t *testing.T) {
	in := spawn(t, testModel(), nil)
	const ok = `rate_limit_config_reloads_total{result="ok"}`
	before, v1 := in.metric(t, ok), in.ConfigVersion()
	writeSnapshot(t, in.path, testModel())
	// The watch reloads 100ms after the last event; a reload of the same policy would have been
	// counted well within this.
	time.Sleep(500 * time.Millisecond)
	if got := in.metric(t, ok); got != before {
		t.Errorf("after rewriting the same policy: %v reloads, want %v", got, before)
	}
	m := testModel()
	m.Domains[0].Rules = append(m.Domains[0].Rules, testRule("added", 1, policy.Stage{Name: policy.StageEnforce}, policy.FailOpen))
	writeSnapshot(t, in.path, m)
	eventually(t, 3*time.Second, "the new version", func() bool { return in.ConfigVersion() != v1 })
	if got := in.metric(t, ok); got != before+1 {
		t.Errorf("after a changed policy: %v reloads, want %v", got, before+1)
	}
}

// TestReloadKeepsSoftMeters: the soft stage's over-quota meter of a rule a reload leaves as it is
// keeps its count (RateLimit-Warning's over= runs high, never low); it restarted at 0 on every
// reload, of whatever rule.
func TestReloadKeepsSoftMeters(t *testing.T) {
	in := spawn(t, testModel(), nil)
	over := func() string {
		resp := in.ask(t, "edge", []string{"stage=soft", "user=meter"})
		w := header(resp, HeaderWarning)
		_, rest, _ := strings.Cut(w, ";over=")
		n, _, _ := strings.Cut(rest, ";")
		return n
	}
	var before string
	for range 10 {
		before = over()
	}
	m := testModel()
	m.Domains[0].Rules = append(m.Domains[0].Rules, testRule("added", 5, policy.Stage{Name: policy.StageEnforce}, policy.FailClosed))
	writeSnapshot(t, in.path, m)
	if err := in.Reload(); err != nil {
		t.Fatal(err)
	}
	after := over()
	b, _ := strconv.Atoi(before)
	a, _ := strconv.Atoi(after)
	if before == "" || a < b {
		t.Errorf("over= before the reload %q, after %q: want it not to fall", before, after)
	}
}

// TestOverrideSoftNotice: a limit override on a soft rule warns as the rule's own limit does,
// with the date enforcement begins (it said no date was set), and its over-quota meter survives
// a reload of another rule (it restarted at 0).
func TestOverrideSoftNotice(t *testing.T) {
	m := testModel()
	m.Domains[0].Rules[2].Stage.Since = "2026-12-01" // "soft"
	m.Domains[0].Governance.SoftDwellMs = 7 * 86_400_000
	in := spawn(t, m, nil)
	warning := func(override bool) string {
		req := request("edge", []string{"stage=soft", "user=o"})
		if override {
			req.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
		}
		resp, err := in.client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return header(resp, HeaderWarning)
	}
	over := func(w string) int {
		_, rest, _ := strings.Cut(w, ";over=")
		n, _, _ := strings.Cut(rest, ";")
		v, _ := strconv.Atoi(n)
		return v
	}
	var own, overridden string
	for range 6 {
		own, overridden = warning(false), warning(true)
	}
	const notice = `;enforce="2026-12-08";msg=`
	if !strings.Contains(own, notice) || !strings.Contains(overridden, notice) || !strings.Contains(overridden, "enforcement begins 2026-12-08") {
		t.Errorf("RateLimit-Warning of the rule's limit %q and of an override %q: want both to name the day enforcement begins", own, overridden)
	}
	before := over(overridden)
	m.Domains[0].Rules = append(m.Domains[0].Rules, testRule("added", 5, policy.Stage{Name: policy.StageEnforce}, policy.FailClosed))
	writeSnapshot(t, in.path, m)
	if err := in.Reload(); err != nil {
		t.Fatal(err)
	}
	if after := over(warning(true)); before == 0 || after < before {
		t.Errorf("an override's over= before a reload %d, after %d: want it not to fall", before, after)
	}
}

// TestJournalKeepsPrevious: an enforcer started on the path of an earlier run's journal keeps
// that journal as FILE.prev: after a crash, a supervisor's restart must not wipe what an
// operator replays.
func TestJournalKeepsPrevious(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	if err := os.WriteFile(path, []byte("the crashed run's journal\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := spawn(t, testModel(), func(c *Config) { c.JournalPath = path })
	in.ask(t, "edge", []string{"stage=enforce", "user=j"})
	if b, err := os.ReadFile(path + ".prev"); err != nil || string(b) != "the crashed run's journal\n" {
		t.Errorf("%s.prev: got %q, %v; want the earlier journal", path, b, err)
	}
}

// TestReloadChangesLimitOfBusyKey: a reload that changes a rule's limits holds a key under
// attack to the new ones at once, on every instance of one Redis. A busy key's lease was
// refilled under the limits it was made with for as long as the key stayed busy: lowered from
// 100,000 to 20 a minute during an attack, a key went on being admitted in full (9,100 of
// 9,100 on two instances). Raised from 5, a key the old limit held as dry must not stay held
// (0 of 4,354 while the hold outlived the limit).
func TestReloadChangesLimitOfBusyKey(t *testing.T) {
	srv := redistest.Start(t)
	model := func(n int64) *policy.Model {
		m := attackModel(policy.TokenBucket, policy.FailClosed)
		m.Domains[0].Rules[0].Limits[0].Requests, m.Domains[0].Rules[0].Limits[0].Burst = n, n
		m.Domains[0].Rules[0].Limits[0].WindowMs = 60_000
		return m
	}
	ins := attackInstances(t, srv, model(100_000), 2)
	reload := func(n int64) {
		t.Helper()
		for _, in := range ins {
			writeSnapshot(t, in.path, model(n))
			if err := in.Reload(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := hammer(t, srv, ins, 4, 300*time.Millisecond, 0); got.admitted < got.requests*9/10 || got.errs > 0 {
		t.Fatalf("under 100,000 a minute: %d of %d admitted, %d errors (%s)", got.admitted, got.requests, got.errs, got.firstErr)
	}

	reload(20)
	got := hammer(t, srv, ins, 4, 500*time.Millisecond, 0)
	// The bucket holds 20 tokens at most, and refills one every 3 s.
	if got.admitted > 20 || got.admitted == 0 || got.errs > 0 {
		t.Errorf("lowered to 20 a minute: %d of %d admitted, %d errors (%s); want 1 to 20",
			got.admitted, got.requests, got.errs, got.firstErr)
	}

	reload(5)
	hammer(t, srv, ins, 4, 200*time.Millisecond, 0) // spends the bucket: the key is held as dry
	reload(100_000)
	// The bucket keeps what it held, next to nothing, and refills 1,667 tokens a second:
	// about 500 in the run. The dry key's hold under 5 a minute (12 s a token) must go.
	if got := hammer(t, srv, ins, 4, 300*time.Millisecond, 0); got.admitted < min(300, got.requests*2/3) || got.errs > 0 {
		t.Errorf("raised from 5 to 100,000 a minute: %d of %d admitted, %d errors (%s); want 300 or more",
			got.admitted, got.requests, got.errs, got.firstErr)
	}
}

// TestReloadForgetsRemovedRules: a reload that removes a rule, or a domain, takes their series
// off /metrics, and so does a snapshot rejected after compiling some of its rules; the rules
// that stay keep their counts. They stayed exported at their last counts until a restart.
func TestReloadForgetsRemovedRules(t *testing.T) {
	m := testModel()
	other := &policy.Domain{Name: "other", Rules: []*policy.Rule{
		testRule("gone-with-domain", 3, policy.Stage{Name: policy.StageEnforce}, policy.FailOpen)}}
	m.Domains = append(m.Domains, other)
	in := spawn(t, m, nil)
	in.ask(t, "edge", []string{"stage=enforce", "user=a"})
	in.ask(t, "edge", []string{"stage=shadow", "user=a"})
	series := func(domain, rule, decision string) float64 {
		return in.metric(t, `rate_limit_requests_total{decision="`+decision+`",domain="`+domain+`",rule="`+rule+`"}`)
	}
	if got := series("edge", "shadow", "ok"); got != 1 {
		t.Fatalf("before the reload, the shadow rule's ok series is %v, want 1", got)
	}
	if got := series("other", "", "ok"); got != 0 {
		t.Fatalf("before the reload, the other domain's unmatched series is %v, want 0", got)
	}

	reduced := testModel()
	reduced.Domains[0].Rules = slices.DeleteFunc(reduced.Domains[0].Rules, func(r *policy.Rule) bool { return r.Name == "shadow" })
	writeSnapshot(t, in.path, reduced)
	if err := in.Reload(); err != nil {
		t.Fatal(err)
	}
	page := clitest.MetricsPage(t, in.AdminAddr())
	for _, gone := range []string{`rule="shadow"`, `domain="other"`} {
		if strings.Contains(page, gone) {
			t.Errorf("after the reload /metrics still has series with %s", gone)
		}
	}
	if got := series("edge", "enforce", "ok"); got != 1 {
		t.Errorf("the enforce rule's ok series is %v after the reload, want 1 (kept)", got)
	}

	// A snapshot that compile rejects after its first domain: the rule it compiled there must
	// not stay behind.
	bad := testModel()
	bad.Domains[0].Rules = append(bad.Domains[0].Rules, testRule("never-served", 3, policy.Stage{Name: policy.StageEnforce}, policy.FailOpen))
	bad.Domains = append(bad.Domains, bad.Domains[0])
	in.reloadMu.Lock()
	err := in.swap(snapshot{model: bad, version: "bad"})
	in.reloadMu.Unlock()
	if err == nil {
		t.Fatal("a snapshot with a domain twice was accepted")
	}
	if page := clitest.MetricsPage(t, in.AdminAddr()); strings.Contains(page, `rule="never-served"`) {
		t.Error("a rejected snapshot's rule has series on /metrics")
	}
	if got := series("edge", "enforce", "ok"); got != 1 {
		t.Errorf("the enforce rule's ok series is %v after a rejected snapshot, want 1 (kept)", got)
	}
}

// TestRolloutKeepsTheCount: while a fleet reloads, an instance still on a rule's old, lower
// limit must not erase what instances on the new one counted. Two instances on one Redis, a
// day's fixed or sliding window: the new one at 1,000, the old one still at 100. The old one's
// call lowered the count of 500 to its 100, and the new one then admitted 1,645 to 1,759 in the window.
func TestRolloutKeepsTheCount(t *testing.T) {
	srv := redistest.Start(t)
	for _, algo := range []policy.Algorithm{policy.FixedWindow, policy.SlidingWindow} {
		t.Run(string(algo), func(t *testing.T) {
			model := func(n int64) *policy.Model {
				m := attackModel(algo, policy.FailClosed)
				m.Domains[0].Rules[0].Limits[0].Requests, m.Domains[0].Rules[0].Limits[0].Burst = n, n
				m.Domains[0].Rules[0].Limits[0].WindowMs = 86_400_000
				return m
			}
			redis := func(c *Config) { c.Store, c.RedisURL = "redis", "redis://"+srv.Addr() }
			updated, old := spawn(t, model(1000), redis), spawn(t, model(100), redis)
			tenant := "rollout-" + string(algo)
			admitted := 0
			send := func(in *instance, n int) {
				t.Helper()
				for range n {
					if in.ask(t, "edge", []string{"tenant=" + tenant}).OverallCode == rlsv3.RateLimitResponse_OK {
						admitted++
					}
				}
			}
			send(updated, 500)
			send(old, 1)
			send(updated, 1500)
			if admitted > 1000 || admitted < 900 {
				t.Errorf("admitted %d in the window, want 900 to 1,000 (the new limit)", admitted)
			}
		})
	}
}

// TestReloadRevertedClearsTheFailure: a bad snapshot, then the one serving again (a bad push
// reverted), as the --config watch reads them. The last reload is a success again: it stayed at
// 0, and RateLimitConfigReloadFailed firing, until another version came.
func TestReloadRevertedClearsTheFailure(t *testing.T) {
	in := spawn(t, testModel(), nil)
	good, err := os.ReadFile(in.path)
	if err != nil {
		t.Fatal(err)
	}
	load := func(raw []byte) {
		t.Helper()
		if err := os.WriteFile(in.path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		in.reloadMu.Lock()
		defer in.reloadMu.Unlock()
		_ = in.loadFile(true)
	}
	load([]byte(`{"schema_version": 2}`))
	if got := in.metric(t, "rate_limit_config_last_reload_successful"); got != 0 {
		t.Fatalf("after a bad snapshot: last reload successful %v, want 0", got)
	}
	load(good)
	if got := in.metric(t, "rate_limit_config_last_reload_successful"); got != 1 {
		t.Errorf("after the serving snapshot again: last reload successful %v, want 1", got)
	}
	// The file gone a moment (rm, then a rewrite of the same bytes): a failed read, then the
	// bytes read last. They were skipped as read already, and the failure stayed.
	if err := os.Remove(in.path); err != nil {
		t.Fatal(err)
	}
	in.reloadMu.Lock()
	_ = in.loadFile(true)
	in.reloadMu.Unlock()
	if got := in.metric(t, "rate_limit_config_last_reload_successful"); got != 0 {
		t.Fatalf("with the file gone: last reload successful %v, want 0", got)
	}
	load(good)
	if got := in.metric(t, "rate_limit_config_last_reload_successful"); got != 1 {
		t.Errorf("with the same bytes back: last reload successful %v, want 1", got)
	}
	if !strings.Contains(in.logs.String(), "config restored") {
		t.Error("no \"config restored\" log line")
	}
	if got := in.metric(t, `rate_limit_config_reloads_total{result="ok"}`); got != 1 {
		t.Errorf("reloads ok: %v, want 1 (the first load; the revert reloads nothing)", got)
	}
}

// TestReloadDirectoryRemade: the snapshot's directory removed and made again (a deploy that
// replaces it as a whole), and a new snapshot written there. The removal's own event happened to
// reload the first one; but the watch stayed on the old directory, and the enforcer kept the
// policy of that day for good, saying nothing: the next change must load too.
func TestReloadDirectoryRemade(t *testing.T) {
	in := spawn(t, testModel(), nil)
	before := in.ConfigVersion()
	dir := filepath.Dir(in.path)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	changed := testModel()
	for i := range 2 {
		changed.Domains[0].Rules[0].Limits[0].Requests++
		writeSnapshot(t, in.path, changed)
		eventually(t, 10*time.Second, fmt.Sprintf("change %d loaded", i+1), func() bool { return in.ConfigVersion() != before })
		before = in.ConfigVersion()
	}
}

// TestReloadDropsIdleManagers: reloads that change a rule's lease settings (with a journal: 64
// stripes) left every setting's managers behind for good, each swept every second: 64 became
// 1,344 over 20 reloads. Those of settings no rule of the last two configs has go once idle.
func TestReloadDropsIdleManagers(t *testing.T) {
	m := testModel()
	in := spawn(t, m, func(c *Config) { c.JournalPath = filepath.Join(t.TempDir(), "journal.jsonl") })
	settings := func(ms ...*policy.Model) int {
		keep := map[policy.Lease]bool{}
		for _, m := range ms {
			for _, r := range m.Domains[0].Rules {
				keep[r.Lease] = true
			}
		}
		return len(keep)
	}
	stripes := in.order.count()
	var prev *policy.Model
	for i := range 20 {
		prev, m = m, testModel()
		m.Domains[0].Rules[0].Lease = policyfixture.Lease(policyfixture.TTL(int64(10_000 + i)))
		writeSnapshot(t, in.path, m)
		if err := in.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	want := settings(m, prev) * stripes
	eventually(t, 5*time.Second, fmt.Sprintf("%d managers (the last two configs' settings × %d stripes)", want, stripes), func() bool {
		return in.leasing.managerCount() == want
	})
}

// TestCompileKeepsNewManagers: managers made while a config compiles, before retain names its
// settings, outlive a sweep that runs in between; dropped then, the config served with
// managers no sweep visits and Close never returned.
func TestCompileKeepsNewManagers(t *testing.T) {
	in := spawn(t, testModel(), nil)
	in.leasing.retain(in.cfg.Load().model) // as after a reload
	r := testRule("fresh", 3, policy.Stage{Name: policy.StageEnforce}, policy.FailOpen)
	r.Lease = policyfixture.Lease(policyfixture.TTL(12_345))
	plan, err := engine.PlanRule("edge", r)
	if err != nil {
		t.Fatal(err)
	}
	before := in.leasing.managerCount()
	if _, err := in.leasing.managers(r.Lease, plan.Lease); err != nil {
		t.Fatal(err)
	}
	in.leasing.dropIdle() // a sweep, before the swap's retain
	if got, want := in.leasing.managerCount(), before+in.order.count(); got != want {
		t.Errorf("managers after a sweep mid-compile: %d, want %d (the new setting's kept)", got, want)
	}
}

// TestReloadAddingALimitKeepsTheCount: a reload that adds a per-second limit before a rule's
// hourly one leaves the hour's count where it was. The store kept a limit's state by its place
// in the list, so the hourly limit, now second, started full: one key attacked for 4 s was
// admitted 2,000 under an hourly limit of 1,000 (engine.TestReloadKeepsOtherLimitsCounts has
// the other changes of the list).
func TestReloadAddingALimitKeepsTheCount(t *testing.T) {
	srv := redistest.Start(t)
	model := func(withSecond bool) *policy.Model {
		m := attackModel(policy.TokenBucket, policy.FailClosed)
		r := m.Domains[0].Rules[0]
		hour := policy.Limit{Requests: 1000, WindowMs: 3_600_000, Burst: 1000, Algorithm: policy.TokenBucket, Cost: 1}
		r.Limits = []policy.Limit{hour}
		if withSecond {
			second := policy.Limit{Requests: 500, WindowMs: 1_000, Burst: 500, Algorithm: policy.TokenBucket, Cost: 1}
			r.Limits = []policy.Limit{second, hour}
		}
		return m
	}
	ins := attackInstances(t, srv, model(false), 1)
	before := hammer(t, srv, ins, 4, 1500*time.Millisecond, 0)
	writeSnapshot(t, ins[0].path, model(true))
	if err := ins[0].Reload(); err != nil {
		t.Fatal(err)
	}
	after := hammer(t, srv, ins, 4, 2500*time.Millisecond, 0)
	t.Logf("under [1000/h]: %d of %d admitted; under [500/s, 1000/h]: %d of %d", before.admitted, before.requests, after.admitted, after.requests)
	// The hour refills 1,000 an hour: about 1 token in 4 s.
	if total := before.admitted + after.admitted; total > 1000+2 {
		t.Errorf("one key admitted %d in 4 s under an hourly limit of 1,000 the reload left as it was", total)
	}
}

// TestJournalIsOwnerOnly: the journal holds descriptor values as sent, API keys included, so it
// is written readable by its owner only, even over an older file that others could read, and
// so is the earlier run's journal it keeps as FILE.prev.
func TestJournalIsOwnerOnly(t *testing.T) {
	for _, old := range []string{"", "{\"k\":\"h\"}\n"} {
		path := filepath.Join(t.TempDir(), "journal.jsonl")
		if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		spawn(t, testModel(), func(c *Config) { c.JournalPath = path })
		files := []string{path}
		if old != "" {
			files = append(files, path+".prev")
		}
		for _, f := range files {
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o600 {
				t.Errorf("%s: mode %v, want 0600", filepath.Base(f), perm)
			}
		}
	}
}
