package plugin

import "github.com/sirupsen/logrus"

// rollback collects the undo steps of a partly done ADD and runs them in
// reverse order. Each step is added only after the thing it undoes was
// actually done by this invocation, so rollback never removes what was
// there before.
type rollback struct {
	steps []undoStep
}

type undoStep struct {
	what string
	fn   func() error
}

func (r *rollback) add(what string, fn func() error) {
	r.steps = append(r.steps, undoStep{what, fn})
}

// run undoes every step, carrying on past failures; what it could not
// undo is logged for the operator (DEL or GC retries it later).
func (r *rollback) run(log *logrus.Entry) {
	for i := len(r.steps) - 1; i >= 0; i-- {
		s := r.steps[i]
		if err := s.fn(); err != nil {
			log.WithError(err).Errorf("rollback: could not %s; CNI DEL or GC will retry", s.what)
			continue
		}
		log.Debugf("rollback: %s", s.what)
	}
}
