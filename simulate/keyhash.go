package simulate

import (
	"hash/maphash"

	"github.com/cespare/xxhash/v2"
	"github.com/rlctl/rlctl/policy"
)

// A hit's store key is the same bytes as its rule's plan builds (engine.RulePlan.AppendKey),
// but a replay hashes the key without building it: most hits are of keys the shards already
// hold, which need only the hashes, and building a key (escaping its values) and then hashing
// it twice was about a tenth of the parsing goroutines' instructions. Two keys of a rule are
// equal exactly when the parts the key is made of are (engine.RulePlan.KeyParts), and a rule
// is only ever selected by its own shape, so its entries' keys are always the same: the hashes
// mix the rule (a hash of its domain and name), the values of those entries and the sub-shard,
// each value hashed once a record however many rules read it. The shard that first meets a key
// builds its bytes (shard.storeKey).

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

// of returns the two hashes of v, the domain's i-th value.
func (vh *valueHashes) of(i int, v string) (x, m uint64) {
	if !vh.have[i] {
		vh.x[i], vh.m[i], vh.have[i] = xxhash.Sum64String(v), maphash.String(keyIDSeed, v), true
	}
	return vh.x[i], vh.m[i]
}

// storeKeyHashes returns the two hashes of the store key of rule rs for entries, a descriptor of
// rs's own shape (entries[j] holds the domain's value shape[j]): hash, the same in every
// process, which places the key in a shard (shardOf) and a keyTable; and id, which tells keys
// of equal hashes apart.
func (vh *valueHashes) storeKeyHashes(rs *ruleSim, shape []int, entries []policy.Entry) (hash, id uint64) {
	hash, id = rs.keySeed, rs.idSeed
	matched, shard := rs.plan.KeyParts(entries)
	for j := range matched {
		x, m := vh.of(shape[j], matched[j].Value)
		hash, id = mixKey(hash, x), mixID(id, m)
	}
	if shard >= 0 {
		hash, id = mixKey(hash, uint64(shard)), mixID(id, uint64(shard))
	}
	return hash, id
}

// mixKey and mixID fold one more part's hash into a key's hash and ID. Each is one to one in the
// part's hash for a given hash so far (an xor, a multiplication by an odd number and an
// xor-shift), so keys whose parts' hashes differ in one place always hash apart; two values of
// equal xxhash have equal maphash hashes too only about once in 2^64, and keys that differ in
// several parts have equal hashes and IDs about once in 2^128.
func mixKey(h, part uint64) uint64 {
	h = (h ^ part) * 0xbf58476d1ce4e5b9
	return h ^ h>>31
}

func mixID(h, part uint64) uint64 {
	h = (h ^ part) * 0x94d049bb133111eb
	return h ^ h>>29
}
