package flowrec

// BreakMarkReader closes the running nflog reader's socket (tests of
// the reader's failure and restart).
func (c *Collector) BreakMarkReader() error { return c.breakMarkReader() }
