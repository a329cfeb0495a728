package flowagg

// ReaderConfig says how a reader (routedctl flows) reaches the
// aggregator.
type ReaderConfig struct {
	// URL is the aggregator's base URL.
	URL string
	// Token is the reader's token; CAFile verifies the aggregator's
	// certificate (empty: the system's roots).
	Token  string
	CAFile string
}
