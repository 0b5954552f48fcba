package enforcer

import (
	"bytes"
	"fmt"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// rlsCodec is gRPC's proto codec, except for a RateLimitRequest whose strings hold bytes that
// are not UTF-8. Envoy sends a header's bytes as they came, and the proto decoder refuses such a
// string before the handler runs: the call fails, and a filter that fails open admits the request
// with every descriptor unchecked, so that one odd byte in a header switched limiting off. Such a
// request is decided with each byte that is not UTF-8 read as U+FFFD (strings.ToValidUTF8), and
// counted (rate_limit_invalid_utf8_requests_total).
type rlsCodec struct {
	encoding.CodecV2
	fixed prometheus.Counter
}

func newRLSCodec(fixed prometheus.Counter) rlsCodec {
	return rlsCodec{CodecV2: encoding.GetCodecV2("proto"), fixed: fixed}
}

func (c rlsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	req, ok := v.(*rlsv3.RateLimitRequest)
	if err == nil || !ok {
		return err
	}
	raw := data.Materialize()
	valid, serr := validUTF8(raw, req.ProtoReflect().Descriptor())
	if serr != nil || bytes.Equal(valid, raw) {
		return err
	}
	proto.Reset(req)
	if uerr := proto.Unmarshal(valid, req); uerr != nil {
		return err
	}
	c.fixed.Inc()
	return nil
}

// validUTF8 returns the wire form b of a message md describes, with every string field, in it
// and in the messages it holds, made valid UTF-8.
func validUTF8(b []byte, md protoreflect.MessageDescriptor) ([]byte, error) {
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		out, b = append(out, b[:n]...), b[n:]
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return nil, protowire.ParseError(m)
			}
			out, b = append(out, b[:m]...), b[m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		b = b[m:]
		if fd := md.Fields().ByNumber(num); fd != nil {
			switch fd.Kind() {
			case protoreflect.StringKind:
				v = []byte(strings.ToValidUTF8(string(v), "\uFFFD"))
			case protoreflect.MessageKind:
				var err error
				if v, err = validUTF8(v, fd.Message()); err != nil {
					return nil, fmt.Errorf("field %d: %w", num, err)
				}
			}
		}
		out = protowire.AppendBytes(out, v)
	}
	return out, nil
}
