package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

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
}

// ErrTooManyBad reports more bad lines than RunConfig.MaxBad.
var ErrTooManyBad = errors.New("too many bad lines")

const batchSize = 512

// batch carries parsed records from the reading goroutine to the replaying one.
type batch struct {
	recs  []accesslog.Record
	preps []prepared
	n     int
	err   error  // a read error that ends the run
	arena []byte // the lines the records' strings view (accesslog.Reader.ReadArena)
	// counted says the reading goroutine counted the records' users for the shared-NAT
	// check; otherwise the replay does.
	counted bool
}

// Run replays inputs, merged by time when there are several (mergedSource), and returns the
// report. Parsing runs on its own goroutine, pipelined with the replay; memory is bounded by a
// few batches plus the simulator's live keys.
func Run(ctx context.Context, cfg RunConfig, inputs []Input) (*report.Report, error) {
	sim, err := New(cfg.Sim)
	if err != nil {
		return nil, err
	}
	if cfg.BadSamples <= 0 {
		cfg.BadSamples = 5
	}
	opts := cfg.Log
	opts.Headers = append(append([]string(nil), opts.Headers...), HeadersFor(cfg.Sim.Model)...)
	if a := cfg.Sim.Assign; a.Kind != "round-robin" && a.Field != "" {
		opts.Headers = append(opts.Headers, strings.ToLower(a.Field))
	}
	readers, err := openReaders(inputs, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	full := make(chan *batch, 4)
	free := make(chan *batch, 6)
	for i := 0; i < 6; i++ {
		free <- &batch{recs: make([]accesslog.Record, batchSize), preps: make([]prepared, batchSize)}
	}
	var bad []report.BadLine
	var badCount int64
	// Counting the users behind addresses for the shared-NAT check does not depend on the
	// replay, and only the report reads the counts, so either goroutine may count a batch:
	// the reader when the replay is behind (full would make it wait), the replay otherwise.
	// Each counts into its own tracker, merged at the end (natTracker.merge).
	readerNAT := sim.nat.empty()
	go func() {
		defer close(full)
		rb := newRequestBuilder()
		prep := func(b *batch) {
			sim.prepare(&b.preps[b.n], rb, &b.recs[b.n], &b.arena)
		}
		count := func(b *batch) {
			if b.counted = len(full) == cap(full); b.counted {
				for i := range b.n {
					sim.countUser(&readerNAT, &b.preps[i])
				}
			}
		}
		err := readAll(ctx, readers, free, full, prep, count, func(le *accesslog.LineError) error {
			badCount++
			if len(bad) < cfg.BadSamples {
				bad = append(bad, report.BadLine{File: le.File, Line: le.Line, Error: le.Err.Error(), Text: le.Text})
			}
			if cfg.MaxBad >= 0 && badCount > cfg.MaxBad {
				return fmt.Errorf("%w: %d, more than --max-bad %d (first at %s:%d: %v)", ErrTooManyBad,
					badCount, cfg.MaxBad, bad[0].File, bad[0].Line, bad[0].Error)
			}
			return nil
		})
		if err != nil {
			select {
			case full <- &batch{err: err}:
			case <-ctx.Done():
			}
		}
	}()
	var runErr error
	for b := range full {
		if b.err != nil {
			runErr = b.err
			break
		}
		if runErr == nil && !b.counted {
			for i := range b.n {
				sim.countUser(&sim.nat, &b.preps[i])
			}
		}
		if runErr == nil {
			for i := 0; i < b.n; i++ {
				if err := sim.replayPrepared(&b.recs[i], &b.preps[i]); err != nil {
					runErr = err
					cancel()
					break
				}
			}
		}
		b.n = 0
		select {
		case free <- b:
		default:
		}
	}
	cancel()
	for range full {
		// Drain so the reader goroutine ends.
	}
	if runErr != nil {
		return nil, runErr
	}
	sim.nat.merge(&readerNAT)
	r, err := sim.Finish()
	if err != nil {
		return nil, err
	}
	r.BadLines, r.BadLineSamples = badCount, bad
	r.UnseenFields = unseenFields(readers)
	for _, in := range inputs {
		r.Logs = append(r.Logs, in.Name)
	}
	r.Finish()
	return r, nil
}

// readAll reads the logs (sourceOf) into batches, calling prepare on each record and send on
// each batch before it is sent.
func readAll(ctx context.Context, readers []*accesslog.Reader, free <-chan *batch, full chan<- *batch,
	prepare, send func(*batch), onBad func(*accesslog.LineError) error) error {
	var b *batch
	get := func() bool {
		select {
		case b = <-free:
			b.arena = b.arena[:0] // the replay is done with the batch's records
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !get() {
		return nil
	}
	src, err := sourceOf(readers, onBad)
	if err != nil {
		return err
	}
	for {
		if err := src.next(&b.recs[b.n], &b.arena); err != nil {
			if err == io.EOF {
				break
			}
			return err
		}
		prepare(b)
		b.n++
		if b.n == len(b.recs) {
			send(b)
			select {
			case full <- b:
			case <-ctx.Done():
				return nil
			}
			if !get() {
				return nil
			}
		}
	}
	if b.n > 0 {
		send(b)
		select {
		case full <- b:
		case <-ctx.Done():
		}
	}
	return nil
}

// sourceOf reads inputs: one log as it is, several merged by time (mergedSource).
func sourceOf(readers []*accesslog.Reader, onBad func(*accesslog.LineError) error) (recordSource, error) {
	if len(readers) == 1 {
		return &logSource{rd: readers[0], onBad: onBad}, nil
	}
	return newMergedSource(readers, onBad)
}

// openReaders opens a reader on each input.
func openReaders(inputs []Input, opts accesslog.Options) ([]*accesslog.Reader, error) {
	readers := make([]*accesslog.Reader, len(inputs))
	for i, in := range inputs {
		rd, err := accesslog.NewReader(in.Name, in.R, opts)
		if err != nil {
			return nil, err
		}
		readers[i] = rd
	}
	return readers, nil
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
