package enforcer

import (
	"context"
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/rlctl/rlctl/xds"
)

// subscribe follows the snapshot that the control plane at --xds serves (package xds): each new
// version goes through the path a reload of the file takes (swap), so the counters and leases
// of unchanged rules survive it. A snapshot that does not load is rejected (NACK) with the
// error, and the last good one keeps serving, as it does while the control plane is away.
func (e *Enforcer) subscribe(ctx context.Context) error {
	connected := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rate_limit_xds_connected",
		Help: "1 while the stream to the xDS control plane (--xds) is up, else 0; the last snapshot keeps serving meanwhile.",
	})
	if err := e.mx.reg.Register(connected); err != nil {
		return fmt.Errorf("enforcer: --xds: %w", err)
	}
	c, err := xds.NewClient(xds.ClientOptions{
		Addr:      e.conf.XDSAddr,
		NodeID:    e.conf.InstanceID,
		UserAgent: "rlctl-enforcer",
		Apply:     e.applyXDS,
		Connected: func(up bool) {
			if up {
				connected.Set(1)
				e.log.Info("xds: connected", "xds", e.conf.XDSAddr)
			} else {
				connected.Set(0)
			}
		},
		Logger: e.log,
	})
	if err != nil {
		return fmt.Errorf("enforcer: --xds: %w", err)
	}
	e.log.Info("xds: subscribing to the control plane; not ready until the first snapshot arrives", "xds", e.conf.XDSAddr)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		c.Run(ctx)
		_ = c.Close()
	}()
	return nil
}

// applyXDS swaps in a snapshot the control plane sent, unless it is the policy already
// serving (a control plane resends it after a reconnect). Its error is the NACK's text.
func (e *Enforcer) applyXDS(version string, raw []byte) error {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	old := e.cfg.Load()
	s, err := parseSnapshot(raw)
	if err == nil && e.serving(s) {
		e.restored()
		return nil
	}
	if err == nil {
		err = e.swap(s)
	}
	if err != nil {
		return e.rejected(fmt.Errorf("enforcer: --xds %s: version %s: %w", e.conf.XDSAddr, version, err))
	}
	if old == nil {
		e.log.Info("config received", "xds", e.conf.XDSAddr, "version", e.ConfigVersion(), "rules", e.cfg.Load().rules)
		e.setServing(true)
	}
	return nil
}

// awaitSnapshot answers ShouldRateLimit with UNAVAILABLE until the first snapshot arrives over
// xDS, so that Envoy applies its failure mode rather than a decision made without a policy.
func (e *Enforcer) awaitSnapshot() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if e.cfg.Load() == nil && info.FullMethod == rlsv3.RateLimitService_ShouldRateLimit_FullMethodName {
			return nil, status.Error(codes.Unavailable, "no policy snapshot yet: waiting for the xDS control plane (--xds)")
		}
		return handler(ctx, req)
	})
}

// setServing sets the gRPC health status of the server and of the RLS service.
func (e *Enforcer) setServing(up bool) {
	if e.health == nil {
		return
	}
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if up {
		st = healthpb.HealthCheckResponse_SERVING
	}
	e.health.SetServingStatus("", st)
	e.health.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, st)
}
