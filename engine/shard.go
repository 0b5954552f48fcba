package engine

// Shard returns the limits of one of shards sub-keys of a hot key: each
// limit's Requests and Burst divided by shards (rounded down, at least 1), so
// that the shards together admit at most what the key would. shards below 2
// returns limits unchanged. The result may need its own Validate: division
// keeps a valid limit valid.
func Shard(limits []Limit, shards int64) []Limit {
	if shards < 2 {
		return limits
	}
	out := make([]Limit, len(limits))
	for i, l := range limits {
		l.Requests = max(1, l.Requests/shards)
		if l.Burst > 0 {
			l.Burst = max(1, l.Burst/shards)
		}
		out[i] = l
	}
	return out
}

// ShardOf picks which of shards sub-keys a request belongs to from a second
// attribute (a client IP, say): a stable FNV-1a hash of value, the same in
// every enforcer and in the simulator. It returns 0 when shards < 2.
func ShardOf(value string, shards int) int {
	if shards < 2 {
		return 0
	}
	return int(fnv32(value) % uint32(shards))
}

// fnv32 is the 32-bit FNV-1a hash: deterministic and allocation-free.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}
