package engine

import "unsafe"

// exactCache remembers the validated exact schemes of the limit slices a
// store saw last, so that a take on a known rule does not repeat the
// divisions of Validate and of the exact scheme (they cost more than the
// decision itself). Entries are found by the slice's address and used only
// when every limit is still equal by value, so a caller that reuses or
// changes a slice gets fresh schemes, never stale ones. It is not safe for
// concurrent use: each Memory shard has its own, under the shard's lock.
type exactCache struct {
	ents [16]exactCacheEntry
}

type exactCacheEntry struct {
	at *Limit
	xs []exact
}

// of returns the exact schemes of limits, validating them when they are not
// cached. The result is valid until the next call.
func (c *exactCache) of(key string, limits []Limit) ([]exact, error) {
	if len(limits) == 0 {
		return exactLimits(nil, key, limits)
	}
	at := &limits[0]
	e := &c.ents[uintptr(unsafe.Pointer(at))>>4%uintptr(len(c.ents))]
	if e.at == at && len(e.xs) == len(limits) {
		hit := true
		for i := range limits {
			if e.xs[i].Limit != limits[i] {
				hit = false
				break
			}
		}
		if hit {
			return e.xs, nil
		}
	}
	xs, err := exactLimits(e.xs[:0], key, limits)
	if err != nil {
		e.at, e.xs = nil, xs[:0]
		return nil, err
	}
	e.at, e.xs = at, xs
	return xs, nil
}
