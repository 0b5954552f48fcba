package xds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	// Addr is the control plane's gRPC address, host:port.
	Addr string
	// NodeID identifies the client to the control plane (the xDS node.id); the control plane
	// serves every node the same snapshot, so it is for its logs.
	NodeID string
	// UserAgent names the client program (the xDS node.user_agent_name).
	UserAgent string
	// Apply receives each snapshot the control plane sends, with the response's version; calls
	// come one at a time. A nil error acknowledges (ACK) the version; an error rejects it
	// (NACK) with the error's text, and the client keeps the last version it acknowledged. A
	// control plane resends the version a client already has after a reconnect: Apply decides
	// whether that is a no-op.
	Apply func(version string, snapshot []byte) error
	// Connected, if set, is called with true when a stream to the control plane has delivered
	// its first response and with false when it ends.
	Connected func(bool)
	// Logger receives the client's logs; nil discards them.
	Logger *slog.Logger
	// DialOptions are added to the client's own (transport credentials, say; the default is
	// plaintext).
	DialOptions []grpc.DialOption
}

// Reconnect backoff: the first retry after a lost stream comes after minBackoff, doubling (with
// jitter) up to maxBackoff while the control plane stays away. gRPC's own connection backoff is
// held to the same ceiling, so a fleet resyncs within seconds of a control plane's return.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// maxRecvMsgSize bounds a response: a snapshot is a few hundred kilobytes for thousands of rules.
const maxRecvMsgSize = 64 << 20

// Client subscribes to the snapshot resource (SnapshotTypeURL) of an rlctl control plane over
// ADS, State of the World, and keeps the subscription up: a lost stream is reopened with
// backoff, presenting the last acknowledged version, so a control plane that comes back sends
// only what changed meanwhile.
type Client struct {
	o    ClientOptions
	conn *grpc.ClientConn
	node *core.Node
	log  *slog.Logger

	mu    sync.Mutex
	acked string // the version last acknowledged
}

// NewClient prepares a client for o.Addr; it does not connect until Run.
func NewClient(o ClientOptions) (*Client, error) {
	if o.Apply == nil {
		return nil, errors.New("xds: ClientOptions.Apply is nil")
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: minBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxBackoff},
			MinConnectTimeout: 5 * time.Second,
		}),
		// A control plane behind a dead network path is noticed within 40s, not at TCP's
		// timeout; serve-xds permits pings this often (controlplane.keepaliveMinTime).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRecvMsgSize)),
	}, o.DialOptions...)
	conn, err := grpc.NewClient(o.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("xds: %s: %w", o.Addr, err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{o: o, conn: conn, log: log,
		node: &core.Node{Id: o.NodeID, UserAgentName: o.UserAgent}}, nil
}

// Version is the version last acknowledged, "" before the first.
func (c *Client) Version() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked
}

// Run keeps the subscription up until ctx is done. It returns when ctx is done.
func (c *Client) Run(ctx context.Context) {
	wait := minBackoff
	for ctx.Err() == nil {
		delivered, err := c.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if delivered {
			wait = minBackoff
		}
		// Jitter spreads a fleet's reconnects when a control plane restarts.
		d := wait/2 + rand.N(wait/2+1)
		c.log.Warn("xds: the stream to the control plane ended; the last good snapshot keeps serving",
			"addr", c.o.Addr, "error", err.Error(), "retry_in", d.String(), "version", c.Version())
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		wait = min(2*wait, maxBackoff)
	}
}

// Close releases the connection. Call it after Run returned.
func (c *Client) Close() error { return c.conn.Close() }

// stream runs one ADS stream until it fails or ctx is done; delivered reports whether a
// response arrived on it.
func (c *Client) stream(ctx context.Context) (delivered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// WaitForReady: while the control plane is away the stream waits for the connection
	// (with gRPC's backoff) instead of failing at once.
	st, err := discovery.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return false, err
	}
	defer func() {
		if delivered && c.o.Connected != nil {
			c.o.Connected(false)
		}
	}()
	req := &discovery.DiscoveryRequest{Node: c.node, TypeUrl: SnapshotTypeURL, VersionInfo: c.Version()}
	for {
		if err := st.Send(req); err != nil {
			return delivered, fmt.Errorf("send: %w", err)
		}
		resp, err := st.Recv()
		if err != nil {
			return delivered, err
		}
		if !delivered {
			delivered = true
			if c.o.Connected != nil {
				c.o.Connected(true)
			}
		}
		req = &discovery.DiscoveryRequest{TypeUrl: SnapshotTypeURL, ResponseNonce: resp.GetNonce()}
		if len(resp.GetResources()) == 0 && resp.GetTypeUrl() == SnapshotTypeURL {
			// State of the World says the resource is gone; a policy never is. The last
			// snapshot keeps serving, and the response is acknowledged all the same: a NACK
			// would only bring the same empty response back.
			c.log.Warn("xds: the control plane sent no snapshot; the last one keeps serving",
				"addr", c.o.Addr, "version", resp.GetVersionInfo())
		} else if err := c.apply(resp); err != nil {
			c.log.Error("xds: snapshot rejected (NACK); the last good snapshot keeps serving",
				"addr", c.o.Addr, "version", resp.GetVersionInfo(), "error", err.Error())
			req.VersionInfo = c.Version()
			req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
			continue
		}
		c.mu.Lock()
		c.acked = resp.GetVersionInfo()
		c.mu.Unlock()
		req.VersionInfo = resp.GetVersionInfo()
	}
}

// apply hands the response's one snapshot to Apply.
func (c *Client) apply(resp *discovery.DiscoveryResponse) error {
	if resp.GetTypeUrl() != SnapshotTypeURL {
		return fmt.Errorf("%w: response of type %q, want %s", ErrResource, resp.GetTypeUrl(), SnapshotTypeURL)
	}
	if n := len(resp.GetResources()); n != 1 {
		return fmt.Errorf("%w: %d snapshot resources, want 1", ErrResource, n)
	}
	raw, err := DecodeSnapshot(resp.GetResources()[0])
	if err != nil {
		return err
	}
	return c.o.Apply(resp.GetVersionInfo(), raw)
}
