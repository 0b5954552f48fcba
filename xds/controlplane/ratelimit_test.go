package controlplane_test

import (
	"context"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/rlctl/rlctl/erlconfig"
	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/xds"
)

// TestRateLimitConfig: an ADS client as envoyproxy/ratelimit runs it (go-control-plane's SotW
// client, any node ID) gets one RateLimitConfig per domain, named after it, as erlconfig
// converts the policy.
func TestRateLimitConfig(t *testing.T) {
	dir := policyCopy(t)
	srv := startServer(t, dir, "127.0.0.1:0")
	conn := dial(t, srv.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := sotw.NewADSClient(ctx, &core.Node{Id: "any-ratelimit-pod"}, xds.RateLimitConfigTypeURL)
	if err := c.InitConnect(conn); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Fetch()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(); err != nil {
		t.Fatal(err)
	}

	m, err := schema.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfgs, _ := erlconfig.FromModel(m)
	if len(resp.Resources) != len(cfgs) || len(cfgs) == 0 {
		t.Fatalf("resources: got %d, want %d (one per domain)", len(resp.Resources), len(cfgs))
	}
	byName := map[string]*rlsconfv3.RateLimitConfig{}
	for i, a := range resp.Resources {
		var got rlsconfv3.RateLimitConfig
		if err := anypb.UnmarshalTo(a, &got, proto.UnmarshalOptions{}); err != nil {
			t.Fatalf("resource %d: %v", i, err)
		}
		byName[got.Name] = &got
	}
	for _, c := range cfgs {
		want, _ := c.Proto()
		if got := byName[c.Domain]; !proto.Equal(got, want) {
			t.Errorf("resource %s: got %v, want %v", c.Domain, got, want)
		}
	}
}
