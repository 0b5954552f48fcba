package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pipelined is the Redis store with concurrent calls sharing round trips
// (implicit pipelining). A call joins a queue; each of a few senders takes
// everything queued, up to a batch, and sends it as one pipeline. Under load,
// N concurrent calls then cost one write and one read on each side instead of N
// of each; a call that finds a sender idle goes out alone at once, so light
// load waits for nothing. Every call is still its own script run, so replies
// are exactly Redis's. It is safe for concurrent use; Close stops it.
type Pipelined struct {
	r         *Redis
	maxBatch  int
	queue     chan *pipeCall
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// pipeCall is one script run waiting for, or in, a pipeline.
type pipeCall struct {
	ctx    context.Context
	script *redis.Script
	key    string
	args   []any
	reply  any
	err    error
	ready  chan struct{} // closed when reply and err are set
}

// ErrStoreClosed is the error of a call made to a Pipelined after Close.
var ErrStoreClosed = errors.New("store closed")

// NewPipelined starts the given number of sender goroutines, each sending
// pipelines of at most maxBatch calls to r's Redis. Do not use it with a Redis
// Cluster client: go-redis runs a cluster pipeline node by node and retries a
// node's whole batch, so one slow master would stall every batch and a retry
// could run a script twice.
func NewPipelined(r *Redis, senders, maxBatch int) *Pipelined {
	p := &Pipelined{r: r, maxBatch: max(1, maxBatch), queue: make(chan *pipeCall, 1024), closed: make(chan struct{})}
	for range max(1, senders) {
		p.wg.Add(1)
		go p.send()
	}
	return p
}

// Take implements Store.
func (p *Pipelined) Take(ctx context.Context, req TakeRequest) (Result, error) {
	args, err := takeArgs(req)
	if err != nil {
		return Result{}, err
	}
	v, err := p.do(ctx, takeScript, req.Key, args)
	if err != nil {
		return Result{}, fmt.Errorf("redis take %q: %w", req.Key, err)
	}
	return parseTake(v)
}

// Return implements Store.
func (p *Pipelined) Return(ctx context.Context, req ReturnRequest) error {
	args, err := returnArgs(req)
	if err != nil {
		return err
	}
	if _, err := p.do(ctx, returnScript, req.Key, args); err != nil {
		return fmt.Errorf("redis return %q: %w", req.Key, err)
	}
	return nil
}

// Close stops the senders. Calls still queued fail with ErrStoreClosed; calls
// made afterwards too. It does not close the Redis client.
func (p *Pipelined) Close() {
	p.closeOnce.Do(func() { close(p.closed) })
	p.wg.Wait()
	for {
		select {
		case c := <-p.queue:
			p.finish(c, nil, ErrStoreClosed)
		default:
			return
		}
	}
}

// do queues one script run and waits for its reply, or for ctx to end.
func (p *Pipelined) do(ctx context.Context, s *redis.Script, key string, args []any) (any, error) {
	c := &pipeCall{ctx: ctx, script: s, key: key, args: args, ready: make(chan struct{})}
	select {
	case <-p.closed:
		return nil, ErrStoreClosed
	default:
	}
	select {
	case p.queue <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.closed:
		return nil, ErrStoreClosed
	}
	select {
	case <-c.ready:
		return c.reply, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.closed:
		return nil, ErrStoreClosed
	}
}

// send is a sender's loop: wait for a call, take whatever else is queued
// behind it, run them all as one pipeline.
func (p *Pipelined) send() {
	defer p.wg.Done()
	batch := make([]*pipeCall, 0, p.maxBatch)
	for {
		select {
		case c := <-p.queue:
			batch = append(batch[:0], c)
		case <-p.closed:
			return
		}
		select {
		case <-p.closed: // a closed store sends nothing more; Close fails the call
			p.finish(batch[0], nil, ErrStoreClosed)
			return
		default:
		}
	fill:
		for len(batch) < p.maxBatch {
			select {
			case c := <-p.queue:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		p.exec(batch)
		clear(batch)
	}
}

// exec runs batch as one pipeline of EVALSHA, then the calls the server had no
// script for (a new or restarted server) as one pipeline of EVAL. The pipeline
// may run until the latest deadline of its calls; a call whose own deadline
// comes first has stopped waiting by then.
func (p *Pipelined) exec(batch []*pipeCall) {
	live := batch[:0] // filtered in place
	var deadline time.Time
	forever := false
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			p.finish(c, nil, err)
			continue
		}
		live = append(live, c)
		if d, ok := c.ctx.Deadline(); !ok {
			forever = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if !forever {
		ctx, cancel = context.WithDeadline(ctx, deadline)
	}
	defer cancel()

	cmds := make([]*redis.Cmd, len(live))
	pipe := p.r.c.Pipeline()
	for i, c := range live {
		cmds[i] = c.script.EvalSha(ctx, pipe, []string{c.key}, c.args...)
	}
	// Each command carries its own error, except where the connection failed before it was
	// read (a refused password, a dial error): then Exec's error is every command's.
	_, execErr := pipe.Exec(ctx)
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe = p.r.c.Pipeline()
		for _, i := range again {
			cmds[i] = live[i].script.Eval(ctx, pipe, []string{live[i].key}, live[i].args...)
		}
		_, execErr = pipe.Exec(ctx)
	}
	for i, c := range live {
		v, err := cmds[i].Result()
		if err == nil && v == nil && execErr != nil {
			err = execErr
		}
		p.finish(c, v, err)
	}
}

func (p *Pipelined) finish(c *pipeCall, v any, err error) {
	c.reply, c.err = v, err
	close(c.ready)
}
