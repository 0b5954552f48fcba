package traffic

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/simulate/accesslog"
)

func TestDeterministic(t *testing.T) {
	for _, f := range []Format{EnvoyJSON, EnvoyText, IstioJSON} {
		var a, b, c bytes.Buffer
		if err := Write(&a, Config{Seed: 7, Lines: 3000, Format: f}); err != nil {
			t.Fatal(err)
		}
		Write(&b, Config{Seed: 7, Lines: 3000, Format: f})
		Write(&c, Config{Seed: 8, Lines: 3000, Format: f})
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%s: same seed gave different bytes", f)
		}
		if bytes.Equal(a.Bytes(), c.Bytes()) {
			t.Errorf("%s: different seeds gave the same bytes", f)
		}
		if got, want := bytes.Count(a.Bytes(), []byte("\n")), 3000; got != want {
			t.Errorf("%s: got %d lines, want %d", f, got, want)
		}
	}
}

// TestGolden pins the generator's output for one seed, so a change to the traffic is a
// deliberate one: run with -update and review the diff.
func TestGolden(t *testing.T) {
	for _, f := range []Format{EnvoyJSON, EnvoyText, IstioJSON} {
		var buf bytes.Buffer
		if err := Write(&buf, Config{Seed: 1, Lines: 40, Format: f}); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, filepath.Join("testdata", "seed1-"+string(f)+".golden"), buf.Bytes())
	}
}

// TestReadable checks that every generated line reads back through accesslog, in time order,
// with one client address however it is read, and that the populations are present.
func TestReadable(t *testing.T) {
	for _, f := range []Format{EnvoyJSON, EnvoyText, IstioJSON} {
		var buf bytes.Buffer
		if err := Write(&buf, Config{Seed: 3, Lines: 20000, Format: f}); err != nil {
			t.Fatal(err)
		}
		r, err := accesslog.NewReader("gen", &buf, accesslog.Options{Headers: []string{"x-tenant-id", "authorization", "x-api-key", "x-ja4", "hostname"}})
		if err != nil {
			t.Fatal(err)
		}
		var rec accesslog.Record
		var n int
		var last int64
		seen := map[string]int{}
		for {
			err := r.Read(&rec)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if rec.TimeMs < last {
				t.Fatalf("%s: line %d goes back in time", f, rec.Line)
			}
			last = rec.TimeMs
			n++
			ip := rec.ClientIP()
			// The remote address and X-Forwarded-For name the same client, so a log read
			// either way replays the same addresses.
			if xffOnly := (accesslog.Record{XFF: rec.XFF}); xffOnly.ClientIP() != ip {
				t.Fatalf("%s: line %d: client %q from the remote address, %q from X-Forwarded-For %q",
					f, rec.Line, ip, xffOnly.ClientIP(), rec.XFF)
			}
			switch {
			case ip == OfficeNATIP:
				seen["office"]++
			case ip == IntegrationIP:
				seen["integration"]++
			case strings.HasPrefix(ip, BotSubnet):
				seen["bot"]++
			case strings.HasPrefix(ip, "100."):
				seen["mobile"]++
			}
			if strings.HasPrefix(rec.Path, "/v1/dashboard/") {
				seen["dashboard"]++
			}
		}
		if n != 20000 {
			t.Errorf("%s: got %d records, want 20000", f, n)
		}
		for _, p := range []string{"office", "integration", "bot", "mobile", "dashboard"} {
			if seen[p] == 0 {
				t.Errorf("%s: no %s traffic in 20000 lines", f, p)
			}
		}
	}
}

func BenchmarkWrite(b *testing.B) {
	for _, f := range []Format{EnvoyJSON, EnvoyText, IstioJSON} {
		b.Run(string(f), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				Write(io.Discard, Config{Seed: 1, Lines: 10000, Format: f})
			}
		})
	}
}
