package simulate

// keySlot is a store key as the reading goroutine knows it: prepare resolves each rule a
// record selects to its key's slot, so that the replay, the busier goroutine, finds the key's
// state without hashing and comparing the long key.
type keySlot struct {
	key string // the store key; set before the slot is shared, never changed
	// ks is the replay's state of the key (nil until the replay first decides on it). Only
	// the replay reads and writes it; it drops a state it prunes (keyState.pruned), and then
	// finds the key's new state the way it finds a new slot's.
	ks *keyState
	// gen is the latest generation of keySlots the key was seen in. Only the reading goroutine
	// reads and writes it, once a generation, so the two goroutines do not contend for the
	// slot's cache line.
	gen int64
}

// keySlots finds the slot of a store key. Slots are forgotten when their key was not seen in
// the current generation (slotGeneration ms of record time) or the one before, so that memory
// follows the live keys; a key that comes back gets a new slot, which costs the replay one
// lookup of the key. Which slot a key has never changes a decision.
type keySlots struct {
	m     map[string]*keySlot
	gen   int64 // the current generation
	until int64 // record time at which it ends
}

// slotGeneration is how long a generation of keySlots lasts, in ms of record time.
const slotGeneration = 60_000

func newKeySlots() keySlots {
	return keySlots{m: map[string]*keySlot{}}
}

// get returns the slot of key, seen in a record of time ms. key may be reused once get returns.
func (c *keySlots) get(key []byte, ms int64) *keySlot {
	if ms >= c.until {
		c.gen++
		c.until = ms + slotGeneration
		for k, sl := range c.m {
			if sl.gen < c.gen-1 {
				delete(c.m, k)
			}
		}
	}
	sl := c.m[string(key)]
	if sl == nil {
		sl = &keySlot{key: string(key)}
		c.m[sl.key] = sl
	}
	if sl.gen != c.gen {
		sl.gen = c.gen
	}
	return sl
}
