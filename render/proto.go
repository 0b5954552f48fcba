package render

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"
)

// marshalJSON writes m as Envoy's configuration reads it: proto field names, indented. protojson
// varies its whitespace on purpose; compacting and indenting again makes the output stable.
func marshalJSON(m proto.Message) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	return buf.Bytes(), nil
}

// marshal writes m in format: "json" (indented, proto field order) or "yaml" (keys sorted).
func marshal(m proto.Message, format string) ([]byte, error) {
	b, err := marshalJSON(m)
	if err != nil {
		return nil, err
	}
	return encode(b, format)
}

// marshalList writes ms as one list.
func marshalList[M proto.Message](ms []M, format string) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, m := range ms {
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := marshalJSON(m)
		if err != nil {
			return nil, err
		}
		buf.Write(b)
	}
	buf.WriteByte(']')
	return encode(buf.Bytes(), format)
}

// encode turns compact JSON into the output format.
func encode(compact []byte, format string) ([]byte, error) {
	if format == "yaml" {
		y, err := yaml.JSONToYAML(compact)
		if err != nil {
			return nil, fmt.Errorf("render: %w", err)
		}
		return y, nil
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, compact, "", "  "); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

func boolValue(b bool) *wrapperspb.BoolValue { return wrapperspb.Bool(b) }
