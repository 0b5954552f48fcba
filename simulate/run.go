package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/report"
)

// Input is one access log to replay.
type Input struct {
	Name string
	R    io.Reader
}

// RunConfig configures Run.
type RunConfig struct {
	Sim Config
	Log accesslog.Options
	// MaxBad is the most bad lines tolerated; more fail the run with ErrTooManyBad. Negative
	// means no limit.
	MaxBad int64
	// BadSamples is how many bad lines the report quotes in full (default 5).
	BadSamples int
	// Workers is how many goroutines parse, and how many run the shards up to one a shard
	// (shardCount): 0 means GOMAXPROCS. The report does not depend on it.
	Workers int
}

// ErrTooManyBad reports more bad lines than RunConfig.MaxBad.
var ErrTooManyBad = errors.New("too many bad lines")

// Run replays inputs, merged by time when there are several (mergedSource), and returns the
// report. It uses every core GOMAXPROCS gives it, and its report is the same, byte for byte,
// whatever that is and whatever RunConfig.Workers says:
//
//   - one goroutine reads the log's lines in order into chunks (several logs are read and
//     parsed there, merged by time);
//   - Workers goroutines parse chunks and prepare their records (descriptor values, selected
//     rules, their store keys' hashes), each chunk on one of them;
//   - one goroutine, the sequencer, takes the chunks in log order and places each record:
//     its replay time, the housekeeping tick before it and its gateway (Simulator.sequence);
//   - min(Workers, shardCount) goroutines run the shards (shard), worker w of n the shards w,
//     w+n, ...; each sees every chunk in log order, and decides the hits and runs the ticks of
//     its shards;
//   - this goroutine, once every worker is done with a chunk, counts its records in log order,
//     tells the observer, and hands the chunk back to the reader.
//
// Memory is bounded by the chunks in flight plus the shards' live keys.
func Run(ctx context.Context, cfg RunConfig, inputs []Input) (*report.Report, error) {
	sim, err := New(cfg.Sim)
	if err != nil {
		return nil, err
	}
	if cfg.BadSamples <= 0 {
		cfg.BadSamples = 5
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	opts := cfg.Log
	opts.Headers = append(append([]string(nil), opts.Headers...), HeadersFor(cfg.Sim.Model)...)
	if a := cfg.Sim.Assign; a.Kind != "round-robin" && a.Field != "" {
		opts.Headers = append(opts.Headers, strings.ToLower(a.Field))
	}
	if opts.Fields == nil {
		opts.Fields = replayFields(cfg.Sim.Assign, opts.Headers)
	}
	readers, err := openReaders(inputs, opts)
	defer func() {
		// Stops the readers' read-ahead of compressed logs, which may be ahead of a run
		// that ended early.
		for _, rd := range readers {
			rd.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	r := &runner{sim: sim, cfg: cfg, readers: readers, parsers: workers, workers: min(workers, shardCount)}
	if err := r.run(ctx); err != nil {
		return nil, err
	}
	rep, err := sim.Finish()
	if err != nil {
		return nil, err
	}
	rep.BadLines, rep.BadLineSamples = r.badCount, r.bad
	rep.UnseenFields = unseenFields(readers)
	for i, in := range inputs {
		rep.Logs = append(rep.Logs, in.Name)
		if len(inputs) > 1 && readers[i].Records() == 0 {
			rep.EmptyLogs = append(rep.EmptyLogs, in.Name)
		}
	}
	rep.Finish()
	return rep, nil
}

// chunkLines is the most lines a chunk carries: enough that handing chunks between goroutines
// costs little per line, few enough that the chunks in flight stay a few megabytes.
// chunkArena is the size of a chunk's arena: a chunk ends early rather than let a line start a
// new buffer (ReadRaw would allocate one, and a fresh buffer costs its page faults again), so
// it ends once less than chunkSlack is left.
const (
	chunkLines = 1024
	chunkArena = 2 << 20
	chunkSlack = 64 << 10
)

// chunk is a run of consecutive records on its way through Run's stages.
type chunk struct {
	seq   int64    // its place in the log, from 0
	arena []byte   // the bytes lines and recs view
	lines []string // the raw lines, for the parsing workers
	nums  []int64  // their line numbers
	// parsed says the reader parsed the records itself (several logs merged by time).
	parsed bool
	recs   []accesslog.Record
	preps  []prepared
	n      int                    // records in recs and preps
	buf    prepBuffers            // what preps view
	bad    []*accesslog.LineError // its bad lines, in line order
	err    error                  // a read error after its lines, which ends the run
	// Set by the sequencer: the gateways its records were placed on, and the stranded tokens
	// of each sampling tick (prepared.sample), by rule, which the shard workers add up.
	gw       *gatewaySet
	stranded []int64
	left     atomic.Int32 // shard workers yet to run it
}

// reset readies c, handed back, for the records at seq.
func (c *chunk) reset(seq int64) {
	c.seq, c.arena, c.lines, c.nums, c.parsed, c.n = seq, c.arena[:0], c.lines[:0], c.nums[:0], false, 0
	c.bad, c.err, c.gw, c.stranded = c.bad[:0], nil, nil, c.stranded[:0]
	c.buf.reset()
}

// runner runs one Run's stages.
type runner struct {
	sim      *Simulator
	cfg      RunConfig
	readers  []*accesslog.Reader
	parsers  int // goroutines parsing and preparing chunks
	workers  int // shard workers
	bad      []report.BadLine
	badCount int64

	cancel  context.CancelFunc
	errOnce sync.Once
	err     error
	failed  atomic.Bool
}

// fail ends the run with err, the first error any stage met.
func (r *runner) fail(err error) {
	r.errOnce.Do(func() {
		r.err = err
		r.failed.Store(true)
		r.cancel()
	})
}

func (r *runner) run(ctx context.Context) error {
	ctx, r.cancel = context.WithCancel(ctx)
	defer r.cancel()
	inFlight := 2*r.parsers + 2*r.workers + 4
	free := make(chan *chunk, inFlight)
	for range inFlight {
		free <- &chunk{recs: make([]accesslog.Record, chunkLines), preps: make([]prepared, chunkLines), arena: make([]byte, 0, chunkArena)}
	}
	toParse := make(chan *chunk, r.parsers)
	parsed := make(chan *chunk, inFlight)
	toRun := make([]chan *chunk, r.workers)
	for w := range toRun {
		toRun[w] = make(chan *chunk, inFlight)
	}
	done := make(chan *chunk, inFlight)
	var all sync.WaitGroup
	// stage starts n goroutines running fn, and runs then once they have all returned.
	stage := func(n int, fn func(i int), then func()) {
		var g sync.WaitGroup
		g.Add(n)
		all.Add(n + 1)
		for i := range n {
			go func() {
				defer all.Done()
				defer g.Done()
				fn(i)
			}()
		}
		go func() {
			defer all.Done()
			g.Wait()
			then()
		}()
	}
	stage(1, func(int) { r.read(ctx, free, toParse) }, func() { close(toParse) })
	stage(r.parsers, func(int) { r.parse(ctx, toParse, parsed) }, func() { close(parsed) })
	stage(1, func(int) { r.sequence(ctx, parsed, toRun) }, func() {
		for _, ch := range toRun {
			close(ch)
		}
	})
	stage(r.workers, func(w int) { r.runShards(newWorker(r.sim, w, r.workers), toRun[w], done) }, func() { close(done) })
	r.merge(done, free)
	all.Wait()
	if r.err == nil {
		// The caller's context ended the run.
		if err := ctx.Err(); err != nil && !r.failed.Load() {
			return err
		}
	}
	return r.err
}

// read reads the logs into chunks, in order.
func (r *runner) read(ctx context.Context, free <-chan *chunk, out chan<- *chunk) {
	var c *chunk
	var seq int64
	next := func() bool {
		select {
		case c = <-free:
			c.reset(seq)
			seq++
			return true
		case <-ctx.Done():
			return false
		}
	}
	send := func() bool {
		select {
		case out <- c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !next() {
		return
	}
	var merged *mergedSource // several logs, read and parsed here; one is parsed by the workers
	if len(r.readers) > 1 {
		src, err := newMergedSource(r.readers, func(le *accesslog.LineError) error {
			c.bad = append(c.bad, le)
			return nil
		})
		if err != nil {
			c.err = err
			send()
			return
		}
		merged = src
	}
	// Declared once, not per line: errors.As makes le escape to the heap, an allocation each.
	var le *accesslog.LineError
	for {
		var err error
		if merged != nil {
			c.parsed = true
			for c.n < chunkLines && cap(c.arena)-len(c.arena) >= chunkSlack && err == nil {
				if err = merged.next(&c.recs[c.n], &c.arena); err == nil {
					c.n++
				}
			}
		} else {
			rd := r.readers[0]
			for len(c.lines) < chunkLines && cap(c.arena)-len(c.arena) >= chunkSlack && err == nil {
				var line string
				var num int64
				line, num, err = rd.ReadRaw(&c.arena)
				switch {
				case err == nil:
					c.lines, c.nums = append(c.lines, line), append(c.nums, num)
				case errors.As(err, &le):
					c.bad, err = append(c.bad, le), nil
				}
			}
		}
		if err != nil && err != io.EOF {
			c.err = err
		}
		if !send() || err != nil {
			return
		}
		if !next() {
			return
		}
	}
}

// parse parses chunks' lines and prepares their records.
func (r *runner) parse(ctx context.Context, in <-chan *chunk, out chan<- *chunk) {
	var parser *accesslog.Parser
	if len(r.readers) == 1 {
		parser = r.readers[0].NewParser()
	}
	rb := r.sim.newBuilder()
	for c := range in {
		if !c.parsed {
			sorted := len(c.bad) == 0
			for i, line := range c.lines {
				err := parser.Parse(line, c.nums[i], &c.recs[c.n])
				if err == nil {
					c.n++
					continue
				}
				// Parse reports every bad line as a *LineError, with its file and line.
				c.bad = append(c.bad, err.(*accesslog.LineError))
			}
			if !sorted {
				// Lines too long to read came first; put every bad line in line order.
				sort.SliceStable(c.bad, func(i, j int) bool { return c.bad[i].Line < c.bad[j].Line })
			}
		}
		for i := range c.n {
			r.sim.prepare(&c.preps[i], rb, &c.recs[i], &c.buf)
		}
		select {
		case out <- c:
		case <-ctx.Done():
			return
		}
	}
}

// sequence takes the chunks in log order, counts their bad lines, places their records
// (Simulator.sequence), and hands each to every shard worker.
func (r *runner) sequence(ctx context.Context, in <-chan *chunk, out []chan *chunk) {
	pending := map[int64]*chunk{}
	var next int64
	rules := len(r.sim.rules)
	for {
		var c *chunk
		var ok bool
		select {
		case c, ok = <-in:
		case <-ctx.Done():
			return
		}
		if !ok {
			return
		}
		pending[c.seq] = c
		for c = pending[next]; c != nil; c = pending[next] {
			delete(pending, next)
			next++
			for _, le := range c.bad {
				if err := r.badLine(le); err != nil {
					r.fail(err)
					return
				}
			}
			samples := 0
			for i := range c.n {
				p := &c.preps[i]
				if err := r.sim.sequence(p, &c.recs[i]); err != nil {
					r.fail(err)
					return
				}
				p.sample = -1
				if sampling(p.since, p.tick) {
					p.sample = samples
					samples++
				}
			}
			if c.err != nil {
				// After its records, as the records before a read error are replayed.
				r.fail(c.err)
				return
			}
			c.stranded = append(c.stranded[:0], make([]int64, samples*rules)...)
			c.gw = r.sim.gw
			c.left.Store(int32(len(out)))
			for _, ch := range out {
				ch <- c // buffered for every chunk in flight
			}
		}
	}
}

// badLine counts a bad line, and fails the run past RunConfig.MaxBad.
func (r *runner) badLine(le *accesslog.LineError) error {
	r.badCount++
	if len(r.bad) < r.cfg.BadSamples {
		r.bad = append(r.bad, report.BadLine{File: le.File, Line: le.Line, Error: le.Err.Error(), Text: le.Text})
	}
	if r.cfg.MaxBad >= 0 && r.badCount > r.cfg.MaxBad {
		return fmt.Errorf("%w: %d, more than --max-bad %d (first at %s:%d: %v)", ErrTooManyBad,
			r.badCount, r.cfg.MaxBad, r.bad[0].File, r.bad[0].Line, r.bad[0].Error)
	}
	return nil
}

// runShards runs worker wk's shards over every chunk, in log order.
func (r *runner) runShards(wk *worker, in <-chan *chunk, done chan<- *chunk) {
	rules := len(r.sim.rules)
	for c := range in {
		for i := 0; i < c.n && !r.failed.Load(); i++ {
			p := &c.preps[i]
			var stranded []int64
			if p.sample >= 0 {
				stranded = c.stranded[p.sample*rules : (p.sample+1)*rules]
			}
			if err := wk.record(p, c.gw, stranded); err != nil {
				r.fail(err)
			}
		}
		if c.left.Add(-1) == 0 {
			done <- c // buffered for every chunk in flight
		}
	}
}

// merge counts the chunks' records in log order once the shard workers are done with them,
// and hands the chunks back to the reader.
func (r *runner) merge(in <-chan *chunk, free chan<- *chunk) {
	pending := map[int64]*chunk{}
	var next int64
	rules := len(r.sim.rules)
	for c := range in {
		pending[c.seq] = c
		for c = pending[next]; c != nil; c = pending[next] {
			delete(pending, next)
			next++
			if !r.failed.Load() {
				for i := range c.n {
					r.sim.tally(&c.preps[i], &c.recs[i])
				}
				for at := 0; at < len(c.stranded); at += rules {
					r.sim.sampled(c.stranded[at : at+rules])
				}
			}
			free <- c
		}
	}
}

// openReaders opens a reader on each input, and refuses a --field mapping that applies to
// none of them. On an error it returns the readers it opened, for the caller to close.
func openReaders(inputs []Input, opts accesslog.Options) ([]*accesslog.Reader, error) {
	readers := make([]*accesslog.Reader, 0, len(inputs))
	for _, in := range inputs {
		rd, err := accesslog.NewReader(in.Name, in.R, opts)
		if err != nil {
			return readers, err
		}
		readers = append(readers, rd)
	}
	return readers, accesslog.CheckMapping(readers, opts.Mapping)
}

// unseenFields are the --field mappings whose key none of the logs had.
func unseenFields(readers []*accesslog.Reader) []string {
	count := map[string]int{}
	for _, rd := range readers {
		for _, spec := range rd.Unseen() {
			count[spec]++
		}
	}
	var out []string
	for spec, n := range count {
		if n == len(readers) {
			out = append(out, spec)
		}
	}
	sort.Strings(out)
	return out
}

// replayFields are the well-known fields of a record that a replay reads (accesslog.Options.Fields),
// given its gateway assignment and the headers it captures: the time, the method, path and
// authority (which sources read as the pseudo-headers), the response code (which it does not
// read, but a line whose code is not a number is a bad line, and must stay one), the client's
// addresses, the user agent when a source reads that header, and the field an assignment names.
// The protocol, request ID and upstream host of most logs are left unread.
func replayFields(a Assignment, headers []string) []string {
	fields := []string{"start_time", "method", "path", "authority", "response_code", "x_forwarded_for", "downstream_remote_address"}
	if slices.ContainsFunc(headers, func(h string) bool { return strings.EqualFold(h, "user-agent") }) {
		fields = append(fields, "user_agent")
	}
	if slices.ContainsFunc(headers, func(h string) bool { return strings.EqualFold(h, "x-request-id") }) {
		fields = append(fields, "request_id") // a source reads it (builtinHeaders)
	}
	if a.Kind != "round-robin" && slices.Contains(accesslog.FieldNames(), a.Field) {
		fields = append(fields, a.Field)
	}
	return fields
}

// HeadersFor lists the request headers a model's sources read, plus the Authorization header
// (for JWT claims) and the TLS fingerprint headers the shared-NAT check uses.
func HeadersFor(m *policy.Model) []string {
	set := map[string]bool{"authorization": true, "x-ja4": true, "x-ja3": true}
	for _, d := range m.Domains {
		for _, s := range d.Sources {
			if s.Header != "" && !strings.HasPrefix(s.Header, ":") {
				set[strings.ToLower(s.Header)] = true
			}
			for _, st := range s.Waterfall {
				if st.Header != "" {
					set[strings.ToLower(st.Header)] = true
				}
			}
		}
	}
	out := make([]string, 0, len(set))
	for h := range set {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}
