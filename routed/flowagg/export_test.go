package flowagg

// BatchesInFlight is how many batch requests hold a slot now.
func (s *Server) BatchesInFlight() int { return len(s.batchSlots) }
