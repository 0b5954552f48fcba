package simulate

import (
	"hash/maphash"

	"github.com/cespare/xxhash/v2"
	"github.com/rlctl/rlctl/engine"
)

// A hit's store key is the same bytes as its rule's plan builds (engine.RulePlan.AppendKey),
// but a replay hashes the key without building it: most hits are of keys the shards already
// hold, which need only the hashes, and building a key (escaping its values) and then hashing
// it twice was about a tenth of the parsing goroutines' instructions. A store key is its rule's
// prefix and the rule's entries, each an escaped key and value, and a sub-sharded rule's shard:
// the rule decides the entries' keys (a rule is only ever selected by its own shape), and
// escaping is one to one, so two hits have equal keys exactly when they have the same rule,
// values and shard. The hashes mix those instead of the key's bytes, each value hashed once
// a record however many rules read it; the shard that decides a new key builds its bytes
// (shard.decide).

// valueHashes holds the two hashes of each of one domain's descriptor values in a record, each
// worked out when a hit first needs it.
type valueHashes struct {
	x, m []uint64 // xxhash, the same in every process, and maphash with keyIDSeed
	have []bool
}

// reset readies vh for a record's n values of a domain.
func (vh *valueHashes) reset(n int) {
	if cap(vh.have) < n {
		vh.x, vh.m, vh.have = make([]uint64, n), make([]uint64, n), make([]bool, n)
	}
	vh.x, vh.m, vh.have = vh.x[:n], vh.m[:n], vh.have[:n]
	clear(vh.have)
}

// of returns value i's two hashes (values being the domain's).
func (vh *valueHashes) of(values []string, i int) (x, m uint64) {
	if !vh.have[i] {
		vh.x[i], vh.m[i], vh.have[i] = xxhash.Sum64String(values[i]), maphash.String(keyIDSeed, values[i]), true
	}
	return vh.x[i], vh.m[i]
}

// storeKeyHashes returns the two hashes of the store key of rule rs for the domain's values
// (by shape, rs's own shape): hash, the same in every process, which places the key in a shard
// (shardOf) and a keyTable; and id, which tells keys of equal hashes apart.
func (vh *valueHashes) storeKeyHashes(rs *ruleSim, shape []int, values []string) (hash, id uint64) {
	hash, id = mixKey(0, uint64(rs.index)), mixID(0, uint64(rs.index))
	matched := shape
	if rs.plan.Shards > 0 && len(shape) > len(rs.rule.Match) {
		matched = shape[:len(shape)-1] // the sub-shard entry: its shard is in the key, not its value
	}
	for _, i := range matched {
		x, m := vh.of(values, i)
		hash, id = mixKey(hash, x), mixID(id, m)
	}
	if rs.plan.Shards > 0 {
		shard := 0
		if len(matched) < len(shape) {
			shard = engine.ShardOf(values[shape[len(shape)-1]], rs.plan.Shards)
		}
		hash, id = mixKey(hash, uint64(shard)), mixID(id, uint64(shard))
	}
	return hash, id
}

// mixKey and mixID fold one more part into a key's hash and ID. Each is one to one in the part
// for a given hash so far (an xor, a multiplication by an odd number and an xor-shift), so keys
// that differ in one part always differ in both; keys that differ in several have equal hashes
// and IDs about once in 2^128, as their parts' hashes are independent.
func mixKey(h, part uint64) uint64 {
	h = (h ^ part) * 0xbf58476d1ce4e5b9
	return h ^ h>>31
}

func mixID(h, part uint64) uint64 {
	h = (h ^ part) * 0x94d049bb133111eb
	return h ^ h>>29
}
