package heartbeat

import (
	"testing"
	"time"
)

func TestBeat(t *testing.T) {
	var b Beat
	if _, ok := b.Age(time.Now()); ok {
		t.Fatal("a new Beat has an age")
	}
	b.Mark()
	if age, ok := b.Age(time.Now().Add(time.Minute)); !ok || age < time.Minute || age > time.Minute+time.Second {
		t.Fatalf("age a minute after Mark: %v %v", age, ok)
	}
	var nilBeat *Beat
	nilBeat.Mark() // must not panic
}
