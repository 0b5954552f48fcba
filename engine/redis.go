package engine

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/common.lua
	luaCommon string
	//go:embed lua/take.lua
	luaTake string
	//go:embed lua/return.lua
	luaReturn string

	takeScript   = redis.NewScript(luaCommon + luaTake)
	returnScript = redis.NewScript(luaCommon + luaReturn)
)

// Redis is the Store for Redis: one Lua script per operation, run with
// EVALSHA (EVAL when the server does not have it yet), on one hash per key
// holding the fields of all its limits, with a TTL of TTL(limits). It works with
// any redis.UniversalClient: a single server, Sentinel failover or Cluster
// (a key's limits share its hash, so they share a slot). For identical
// requests at identical times its replies and the hash's fields are identical
// to Memory's. Redis is safe for concurrent use.
type Redis struct {
	c redis.UniversalClient
}

// NewRedis returns a Store that keeps state in the Redis behind c.
func NewRedis(c redis.UniversalClient) *Redis {
	return &Redis{c: c}
}

// Take implements Store.
func (r *Redis) Take(ctx context.Context, req TakeRequest) (Result, error) {
	args, err := takeArgs(req)
	if err != nil {
		return Result{}, err
	}
	v, err := takeScript.Run(ctx, r.c, []string{req.Key}, args...).Result()
	if err != nil {
		return Result{}, fmt.Errorf("redis take %q: %w", req.Key, err)
	}
	return parseTake(v)
}

// Return implements Store.
func (r *Redis) Return(ctx context.Context, req ReturnRequest) error {
	args, err := returnArgs(req)
	if err != nil {
		return err
	}
	if err := returnScript.Run(ctx, r.c, []string{req.Key}, args...).Err(); err != nil {
		return fmt.Errorf("redis return %q: %w", req.Key, err)
	}
	return nil
}

// Preload loads both scripts on the server, or on every master of a
// Cluster, so that the first takes need no EVAL fallback; it doubles as a
// readiness check. Calling it is optional.
func (r *Redis) Preload(ctx context.Context) error {
	load := func(ctx context.Context, c redis.Scripter) error {
		for _, s := range []*redis.Script{takeScript, returnScript} {
			if err := s.Load(ctx, c).Err(); err != nil {
				return fmt.Errorf("redis: load script: %w", err)
			}
		}
		return nil
	}
	if cc, ok := r.c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return load(ctx, n) })
	}
	return load(ctx, r.c)
}

// takeArgs validates req and builds the take script's ARGV.
func takeArgs(req TakeRequest) ([]any, error) {
	limits, want, need, err := req.normalize()
	if err != nil {
		return nil, err
	}
	return appendLimits([]any{max(req.Now, 0), want, need, ttl(limits), len(limits)}, limits), nil
}

// returnArgs validates req and builds the return script's ARGV.
func returnArgs(req ReturnRequest) ([]any, error) {
	limits, n, err := req.normalize()
	if err != nil {
		return nil, err
	}
	return appendLimits([]any{max(req.Now, 0), n, max(req.TakenAt, 0), ttl(limits), len(limits)}, limits), nil
}

// appendLimits appends six numbers per limit: algorithm, requests, window,
// capacity, token units and rate.
func appendLimits(args []any, limits []exact) []any {
	for _, l := range limits {
		tu, rate := l.units() // windows ignore them, but the script reads six numbers
		args = append(args, int(l.Algorithm), l.Requests, l.Window, l.capacity, tu, rate)
	}
	return args
}

func parseTake(v any) (Result, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 6 {
		return Result{}, fmt.Errorf("redis take: unexpected reply %v", v)
	}
	var n [6]int64
	for i, x := range a {
		switch x := x.(type) {
		case int64:
			n[i] = x
		case string:
			v, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return Result{}, fmt.Errorf("redis take: reply %d: %w", i, err)
			}
			n[i] = v
		default:
			return Result{}, fmt.Errorf("redis take: reply %d: unexpected %T", i, x)
		}
	}
	return Result{Granted: n[0], Remaining: n[1], RetryAfter: n[2], ResetAfter: n[3], Limiting: int(n[4]), Now: n[5]}, nil
}
