package engine

// Keys is the number of keys the manager holds local state for: leases that Sweep has not
// forgotten yet. A manager with none has nothing to sweep.
func (m *LeaseManager) Keys() int {
	if m.single {
		return m.leaseCount()
	}
	n := 0
	m.each(func(*lease) { n++ })
	return n
}
