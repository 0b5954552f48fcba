package enforcer

import (
	"context"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// rawCodec sends a request's wire bytes as they are, as Envoy does with a header's bytes; Go's
// proto encoder would refuse a string that is not UTF-8.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }
func (rawCodec) Name() string                       { return "proto" }

// rawRequest is the wire form of a RateLimitRequest for domain with one descriptor of entries
// (key, value pairs), strings written byte for byte.
func rawRequest(domain string, entries ...[2]string) []byte {
	var desc []byte
	for _, e := range entries {
		var ent []byte
		ent = protowire.AppendTag(ent, 1, protowire.BytesType)
		ent = protowire.AppendString(ent, e[0])
		ent = protowire.AppendTag(ent, 2, protowire.BytesType)
		ent = protowire.AppendString(ent, e[1])
		desc = protowire.AppendTag(desc, 1, protowire.BytesType)
		desc = protowire.AppendBytes(desc, ent)
	}
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, desc)
}

// TestInvalidUTF8IsLimited: a descriptor value with bytes that are not UTF-8 (a header as a
// client sent it) is limited like any other. gRPC's decoder refused the call before the
// handler ran, and Envoy's filter, failing open, admitted every such request unchecked.
func TestInvalidUTF8IsLimited(t *testing.T) {
	in := spawn(t, testModel(), nil)
	conn, err := grpc.NewClient(in.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := rawRequest("edge", [2]string{"stage", "enforce"}, [2]string{"user", "bad\xff\xfe"})
	var codes []rlsv3.RateLimitResponse_Code
	for range 5 {
		resp := &rlsv3.RateLimitResponse{}
		if err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", req, resp); err != nil {
			t.Fatalf("ShouldRateLimit with a value that is not UTF-8: %v", err)
		}
		codes = append(codes, resp.OverallCode)
	}
	want := []rlsv3.RateLimitResponse_Code{ok, ok, ok, over, over} // the rule's 3 a minute
	for i := range want {
		if codes[i] != want[i] {
			t.Fatalf("codes: got %v, want %v", codes, want)
		}
	}
	if got := in.metric(t, "rate_limit_invalid_utf8_requests_total"); got != 5 {
		t.Errorf("rate_limit_invalid_utf8_requests_total: got %v, want 5", got)
	}
	// A valid request goes through the ordinary decoder, uncounted.
	in.ask(t, "edge", []string{"stage=enforce", "user=fine"})
	if got := in.metric(t, "rate_limit_invalid_utf8_requests_total"); got != 5 {
		t.Errorf("after a valid request: %v, want 5", got)
	}
}
