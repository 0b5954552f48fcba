package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// Cluster is a Redis Cluster of masters without replicas, started by
// StartCluster.
type Cluster struct {
	servers []*Server
	client  *redis.ClusterClient
}

// StartCluster starts masters redis-server processes with cluster mode on
// (each on a free port whose bus port, +10000, is free too), splits the 16384
// slots evenly among them, joins them with CLUSTER MEET and waits until every
// node reports cluster_state:ok. Servers are stopped at cleanup like Start's.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	if masters < 1 {
		tb.Fatalf("redistest: cluster of %d masters", masters)
	}
	c := &Cluster{}
	for range masters {
		c.servers = append(c.servers, Start(tb,
			func(cf *config) { cf.bus = true },
			WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", "2000")))
	}
	ctx := context.Background()
	for i, s := range c.servers {
		lo, hi := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		if err := s.Client().Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			tb.Fatalf("redistest: %s: CLUSTER ADDSLOTSRANGE %d %d: %v", s.Addr(), lo, hi, err)
		}
	}
	first := c.servers[0].Client()
	for _, s := range c.servers[1:] {
		if err := first.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(s.Port())).Err(); err != nil {
			tb.Fatalf("redistest: CLUSTER MEET %s: %v", s.Addr(), err)
		}
	}
	if err := c.waitOK(ctx, 20*time.Second); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	c.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.client.Close() })
	return c
}

// waitOK waits until every node says cluster_state:ok and knows every other.
func (c *Cluster) waitOK(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	want := fmt.Sprintf("cluster_known_nodes:%d", len(c.servers))
	for {
		ok := true
		var last string
		for _, s := range c.servers {
			info, err := s.Client().ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, want) {
				ok, last = false, fmt.Sprintf("%s: %v %s", s.Addr(), err, info)
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready after %v: %s", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Addrs are the masters' host:port addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.servers))
	for i, s := range c.servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Servers are the masters, for killing or pausing one of them.
func (c *Cluster) Servers() []*Server { return c.servers }

// Client is a go-redis cluster client for all masters, closed at cleanup,
// with ContextTimeoutEnabled like Server.Client.
func (c *Cluster) Client() *redis.ClusterClient { return c.client }
