package engine

// This file holds what lets Memory.Expire look only at the keys that may have expired
// instead of every key: a list of expiry times per shard.

// expiry asks Expire to look at entry e from time at on.
type expiry struct {
	at int64
	e  *memEntry
}

// expiryList holds an expiry for every entry of a shard's map, no later than the entry's
// own. It is lazy: an entry's expiry moving later leaves its time in the list where it is,
// and Expire, finding the entry early, moves the time on then; only an expiry moving earlier
// (a new entry, or a TTL that shrank with the key's limits) appends a time at once, which
// makes the entry's earlier time stale. So a take costs a comparison. The list is in no
// order: Expire scans the times, which lie side by side in the array and cost far less to
// read than the entries behind them, and reads only the entries that are due. Walking the
// map instead read every entry at every Expire; a heap read fewer, but each pop cost more
// than a map step.
type expiryList []expiry

// expire drops the state of the shard's keys whose TTL has passed at now and returns how
// many it dropped. The caller holds sh's lock.
func (sh *memShard) expire(now int64) int {
	if now < sh.nextExpiry {
		return 0 // nothing is due: an idle Expire reads no more than this
	}
	xs := sh.expiries
	n, kept := 0, 0
	next := int64(notDue)
	for _, x := range xs {
		if x.at > now {
			xs[kept] = x
			kept++
			next = min(next, x.at)
			continue
		}
		e := x.e
		if x.at != e.dueAt {
			continue // stale: the entry's live time is earlier, or it was dropped
		}
		if now >= e.expire {
			e.dropped, e.dueAt = true, notDue
			if sh.unindexed {
				sh.live--
			} else {
				delete(sh.m, e.key)
			}
			n++
			continue
		}
		e.dueAt = e.expire
		xs[kept] = expiry{at: e.expire, e: e}
		kept++
		next = min(next, e.expire)
	}
	clear(xs[kept:])
	xs = xs[:kept]
	if c := cap(xs); c > shrinkAbove && kept <= c/4 {
		// After a flood of keys has expired, let the array's peak go.
		xs = append(make(expiryList, 0, 2*kept), xs...)
	}
	sh.expiries, sh.nextExpiry = xs, next
	return n
}

// dropStale removes the times of entries that have a live time of their own or were dropped,
// keeping the list's order.
func (xs *expiryList) dropStale() {
	kept := 0
	for _, x := range *xs {
		if x.at == x.e.dueAt {
			(*xs)[kept] = x
			kept++
		}
	}
	clear((*xs)[kept:])
	*xs = (*xs)[:kept]
}

// expireBy records that entry e of sh expires at, its time earlier than any
// it had. The caller holds sh's lock.
func (sh *memShard) expireBy(e *memEntry, at int64) {
	e.dueAt = at
	sh.expiries = append(sh.expiries, expiry{at: at, e: e})
	sh.nextExpiry = min(sh.nextExpiry, at)
}
