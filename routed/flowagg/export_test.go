package flowagg

// BatchesInFlight is how many batch requests hold a slot now.
func (s *Server) BatchesInFlight() int { return len(s.batchSlots) }

// Streams is how many readers' GET /v1/flows are being served now.
func (s *Server) Streams() int { return int(s.streams.Load()) }

// LingerTimeout is how long a closed connection lingers at most.
const LingerTimeout = lingerTimeout
