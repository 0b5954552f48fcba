// Package traffic generates realistic, deterministic synthetic gateway traffic as access logs,
// for demos, tests and benchmarks of the simulator (`rlctl gen-logs`).
//
// The same Config always produces the same bytes: all randomness comes from one PCG generator
// seeded by Config.Seed, and nothing reads the clock. The traffic mixes the populations that make
// rate limiting hard:
//
//   - API tenants whose request volumes follow a Zipf distribution, calling with API keys;
//   - an enterprise integration calling at a steady high rate from one server;
//   - dashboard page loads that fire 25 parallel calls at once;
//   - a corporate office of 2,000 signed-in users behind one NAT address;
//   - a scraping bot rotating addresses inside one /24, with one TLS fingerprint;
//   - mobile users behind carrier-grade NAT (100.64.0.0/10);
//   - anonymous web browsing;
//   - payment calls from tenants' back ends.
package traffic

import (
	"bufio"
	"container/heap"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// Format is an output format.
type Format string

// The formats gen-logs writes: Envoy JSON lines with the request headers under their own
// names (Request.AppendJSON), Envoy's default text format (Request.AppendText), and Istio's
// default JSON access log with the same headers added (Request.AppendIstioJSON).
const (
	EnvoyJSON Format = "envoy-json"
	EnvoyText Format = "envoy-text"
	IstioJSON Format = "istio-json"
)

// ParseFormat checks a format name.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case EnvoyJSON, EnvoyText, IstioJSON:
		return f, nil
	}
	return "", fmt.Errorf("format %q: want envoy-json, envoy-text or istio-json", s)
}

// Config says what to generate.
type Config struct {
	Seed  uint64
	Lines int
	// Start is the first request's time; the zero value means 2024-05-01T12:00:00Z.
	Start time.Time
	// Gateways is the number of gateway nodes named in the "hostname" field (default 4).
	Gateways int
	// Format is the shape of the lines; the zero value means EnvoyJSON.
	Format Format
}

// DefaultStart is the start time when Config.Start is zero.
var DefaultStart = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// Write writes cfg.Lines access-log lines to w.
func Write(w io.Writer, cfg Config) error {
	if cfg.Format == "" {
		cfg.Format = EnvoyJSON
	}
	format, err := ParseFormat(string(cfg.Format))
	if err != nil {
		return fmt.Errorf("traffic: %w", err)
	}
	if cfg.Lines < 0 {
		return fmt.Errorf("traffic: lines %d: must not be negative", cfg.Lines)
	}
	if cfg.Gateways <= 0 {
		cfg.Gateways = 4
	}
	start := cfg.Start
	if start.IsZero() {
		start = DefaultStart
	}
	g := newGenerator(cfg.Seed, start.UnixMilli(), cfg.Gateways)
	bw := bufio.NewWriterSize(w, 256<<10)
	var line []byte
	var req Request
	for i := 0; i < cfg.Lines; i++ {
		g.next(&req)
		switch format {
		case EnvoyText:
			line = req.AppendText(line[:0])
		case IstioJSON:
			line = req.AppendIstioJSON(line[:0])
		default:
			line = req.AppendJSON(line[:0])
		}
		if _, err := bw.Write(line); err != nil {
			return fmt.Errorf("traffic: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("traffic: %w", err)
	}
	return nil
}

// event is one scheduled request of an actor (seq breaks ties so the order is total).
type event struct {
	t     int64
	seq   uint64
	actor actor
	burst *burst // set for one call of a dashboard page load
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].t != e[j].t {
		return e[i].t < e[j].t
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

type generator struct {
	rng      *rand.Rand
	zipf     *rand.Zipf
	q        events
	seq      uint64
	gateways int
	reqID    uint64
}

func newGenerator(seed uint64, startMs int64, gateways int) *generator {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	g := &generator{
		rng:      rng,
		zipf:     rand.NewZipf(rng, 1.2, 1, uint64(len(Tenants)-1)),
		gateways: gateways,
	}
	for a := actor(0); a < numActors; a++ {
		g.schedule(event{t: g.nextTime(a, startMs), actor: a})
	}
	return g
}

func (g *generator) schedule(e event) {
	g.seq++
	e.seq = g.seq
	heap.Push(&g.q, e)
}

// next fills req with the next request in time order.
func (g *generator) next(req *Request) {
	e := heap.Pop(&g.q).(event)
	*req = Request{TimeMs: e.t}
	if e.burst == nil {
		g.schedule(event{t: g.nextTime(e.actor, e.t), actor: e.actor})
	}
	g.fill(e, req)
	g.reqID++
	req.RequestID = fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(g.reqID*2654435761), g.reqID&0xffff,
		g.rng.Uint32()&0xfff, g.rng.Uint32()&0xfff, g.rng.Uint64()&0xffffffffffff)
	req.Gateway = fmt.Sprintf("gw-%d", g.rng.IntN(g.gateways))
	req.Upstream = fmt.Sprintf("10.1.%d.%d:8080", g.rng.IntN(4), 10+g.rng.IntN(20))
	req.Status = 200
	switch r := g.rng.IntN(1000); {
	case r < 8:
		req.Status = 500
	case r < 30:
		req.Status = 404
	}
	req.Duration = 2 + g.rng.IntN(40)
	req.BytesSent = 200 + g.rng.IntN(4000)
}

// exp returns an exponential interval with the given mean in ms, at least 1.
func (g *generator) exp(meanMs float64) int64 {
	return max(1, int64(g.rng.ExpFloat64()*meanMs))
}
