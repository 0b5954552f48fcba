package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/rlctl/rlctl/internal/loadgen"
)

// okRLS answers every call OK. The load generator's own tests are in internal/loadgen.
type okRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (okRLS) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// TestBenchCommand runs rlctl bench end to end against a target that then goes away: the
// formats, and the exit codes of a completed and of a stopped run.
func TestBenchCommand(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, okRLS{})
	go gs.Serve(lis)
	defer gs.Stop()
	bench := func(args ...string) (code int, stdout, stderr string) {
		var out, errOut bytes.Buffer
		args = append([]string{"bench", "--target", lis.Addr().String(), "--concurrency", "2", "--connections", "1",
			"--duration", "200ms", "--domain", "d", "--descriptor", "k=v"}, args...)
		code = Main(args, strings.NewReader(""), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := bench()
	if code != ExitClean || errOut != "" {
		t.Fatalf("text: got exit %d, stderr %q; want %d and none", code, errOut, ExitClean)
	}
	want := regexp.MustCompile(`^target       127\.0\.0\.1:\d+ \(concurrency 2\)
requests     \d+ answered in 0\.\d\ds
rps          \d+
latency      p50 \d+µs  p90 \d+µs  p99 \d+µs  p999 \d+µs  max \d+µs
ok           \d+
over_limit   0
errors       0
$`)
	if !want.MatchString(out) {
		t.Errorf("text: got\n%s", out)
	}

	code, out, _ = bench("-o", "json")
	var r loadgen.Result
	if err := json.Unmarshal([]byte(out), &r); code != ExitClean || err != nil || r.Requests == 0 || r.OK != r.Requests {
		t.Errorf("json: got exit %d, %v, %+v; want %d and only OK requests", code, err, r, ExitClean)
	}

	gs.Stop()
	code, out, errOut = bench("--duration", "1m", "--max-unavailable", "300ms")
	if code != ExitUsage || out != "" || !strings.HasPrefix(errOut, "rlctl: bench: --target ") {
		t.Errorf("target gone: got exit %d, stdout %q, stderr %q; want %d, no output, and an error", code, out, errOut, ExitUsage)
	}
}
