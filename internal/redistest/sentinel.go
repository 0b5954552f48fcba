package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name Sentinel monitors the master under.
const MasterName = "rlctl"

// Sentinel is a master, one replica and one Sentinel (quorum 1) that fails
// over half a second after the master stops answering.
type Sentinel struct {
	master, replica, sentinel *Server
	client                    *redis.Client
}

// StartSentinel starts a master, a replica of it and a Sentinel monitoring
// it as MasterName, and waits until the Sentinel knows the replica, so that
// killing (or pausing) the master promotes the replica. Processes are stopped
// at cleanup like Start's.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	s := &Sentinel{master: Start(tb)}
	s.replica = Start(tb, WithArgs("--replicaof", "127.0.0.1", fmt.Sprint(s.master.Port())))
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %[1]s 500\n"+
		"sentinel failover-timeout %[1]s 5000\n", MasterName, s.master.Port())
	s.sentinel = Start(tb, func(c *config) { c.sentinel = conf })

	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.sentinel.Addr()})
	defer sc.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		replicas, err := sc.Replicas(ctx, MasterName).Result()
		if err == nil && len(replicas) > 0 && replicas[0]["flags"] == "slave" {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: sentinel does not see the replica: %v %v", replicas, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.client = redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: MasterName, SentinelAddrs: []string{s.sentinel.Addr()}, ContextTimeoutEnabled: true,
	})
	tb.Cleanup(func() { _ = s.client.Close() })
	return s
}

// Master is the server that was master at start.
func (s *Sentinel) Master() *Server { return s.master }

// Replica is the server that was its replica at start.
func (s *Sentinel) Replica() *Server { return s.replica }

// Sentinel is the Sentinel process.
func (s *Sentinel) Sentinel() *Server { return s.sentinel }

// Addr is the Sentinel's host:port.
func (s *Sentinel) Addr() string { return s.sentinel.Addr() }

// Client is a go-redis failover client that follows the current master,
// closed at cleanup, with ContextTimeoutEnabled like Server.Client.
func (s *Sentinel) Client() *redis.Client { return s.client }
