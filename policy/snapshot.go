package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// SnapshotVersion is the schema_version WriteSnapshot writes and ReadSnapshot accepts. It changes
// when a snapshot written by one rlctl could be misread by another.
const SnapshotVersion = 1

// snapshot is the envelope around a model.
type snapshot struct {
	SchemaVersion int             `json:"schema_version"`
	ContentHash   string          `json:"content_hash"`
	Model         json.RawMessage `json:"model"`
}

// ContentHash returns "sha256:<hex>" of m's meaning: its canonical JSON encoding with every
// source position left out. Two models with the same hash are the same policy, however the files
// were named on the command line and wherever in them comments or blank lines move the rules.
// Rules are hashed in declared order, which decides among wildcards that compete, so a rule moved
// ahead of another (in its file, or to another file) changes the hash.
func ContentHash(m *Model) (string, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	return hashOf(b)
}

func hashOf(modelJSON []byte) (string, error) {
	var v any
	if err := json.Unmarshal(modelJSON, &v); err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	// encoding/json writes map keys sorted, so this encoding is canonical.
	b, err := json.Marshal(withoutPositions(v))
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// withoutPositions drops every "pos" field from a decoded JSON value.
func withoutPositions(v any) any {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "pos")
		for k, e := range v {
			v[k] = withoutPositions(e)
		}
	case []any:
		for i, e := range v {
			v[i] = withoutPositions(e)
		}
	}
	return v
}

// WriteSnapshot writes m to w as a versioned JSON snapshot:
//
//	{"schema_version": 1, "content_hash": "sha256:<hex>", "model": {...}}
//
// where the hash is ContentHash's: it covers the model but not source positions. The output is indented for
// people; ReadSnapshot does not depend on the layout.
func WriteSnapshot(w io.Writer, m *Model) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	hash, err := hashOf(b)
	if err != nil {
		return err
	}
	out, err := json.MarshalIndent(snapshot{SnapshotVersion, hash, b}, "", "  ")
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	out = append(out, '\n')
	if _, err := w.Write(out); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// ErrSnapshotVersion means a snapshot has a schema_version this rlctl does not read.
var ErrSnapshotVersion = errors.New("unsupported schema_version")

// ErrSnapshotHash means a snapshot's model does not match its content_hash: it was edited or
// damaged after it was written.
var ErrSnapshotHash = errors.New("content_hash does not match its model")

// ErrSnapshotModel means a snapshot's model fails Validate; the error also holds the Problems.
var ErrSnapshotModel = errors.New("model is not valid")

// snapshotTolerated are the Validate checks that ReadSnapshot lets through: they are about how a
// policy is written, and the enforcer reads nothing they check. It matches descriptors by key and
// never reads sources ("unknown-descriptor"), and a canary at 0% is soft everywhere
// ("canary-percent"). schema.Load refuses both, so rlctl never writes such a snapshot.
var snapshotTolerated = map[string]bool{"unknown-descriptor": true, "canary-percent": true}

// ReadSnapshot reads a snapshot that WriteSnapshot wrote. It rejects unknown fields, another
// schema_version (ErrSnapshotVersion), a model that does not match content_hash
// (ErrSnapshotHash) and a model that fails Model.Validate (ErrSnapshotModel, with the Problems;
// see snapshotTolerated for the two checks it lets through).
func ReadSnapshot(r io.Reader) (*Model, error) {
	m, err := decodeSnapshot(r)
	if err != nil {
		return nil, err
	}
	var probs Problems
	for _, p := range m.Validate() {
		if !snapshotTolerated[p.Check] {
			probs = append(probs, p)
		}
	}
	if len(probs) > 0 {
		return nil, fmt.Errorf("snapshot: %w: %w", ErrSnapshotModel, probs)
	}
	return m, nil
}

// decodeSnapshot decodes a snapshot and checks its version and hash, but not its model.
func decodeSnapshot(r io.Reader) (*Model, error) {
	var s snapshot
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if s.SchemaVersion != SnapshotVersion {
		return nil, fmt.Errorf("snapshot: %w: got %d, want %d", ErrSnapshotVersion, s.SchemaVersion, SnapshotVersion)
	}
	if len(s.Model) == 0 || bytes.Equal(s.Model, []byte("null")) {
		return nil, errors.New("snapshot: no model")
	}
	m := &Model{}
	dec = json.NewDecoder(bytes.NewReader(s.Model))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			// A field this version does not know is one a later version added: what it
			// means cannot be enforced by guessing.
			return nil, fmt.Errorf("snapshot: model: %w (written by a later rlctl than this one? upgrade the enforcers before rlctl and serve-xds)", err)
		}
		return nil, fmt.Errorf("snapshot: model: %w", err)
	}
	got, err := ContentHash(m)
	if err != nil {
		return nil, err
	}
	if got != s.ContentHash {
		return nil, fmt.Errorf("snapshot: %w: content_hash %s, model hashes to %s", ErrSnapshotHash, s.ContentHash, got)
	}
	return m, nil
}
