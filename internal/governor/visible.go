package governor

import "fmt"

// recentReading is what the engine keeps of one of a worker's last readings
// to weigh its people's memory growth: the worker's memory and each
// person's growth (a shrink counts as 0).
type recentReading struct {
	mem   float64
	grown map[string]float64
}

// keep remembers r among w's last readings: UsageWait+1 of them weigh the
// memory draw, one more is the base the worker's rise is measured from. It
// then sums each person's growth over those readings (grown) and counts,
// per resource w is hot on, the readings in a row whose per-person numbers
// do not show the consumption behind its level (unseen).
func (w *worker) keep(r Reading, p Policy) {
	rr := recentReading{mem: float64(r.Memory()), grown: make(map[string]float64, len(r.PerUser))}
	for u, use := range r.PerUser {
		rr.grown[u] = use.weight(Memory)
	}
	w.recent = append(w.recent, rr)
	if over := len(w.recent) - (p.UsageWait + 2); over > 0 {
		w.recent = append(w.recent[:0], w.recent[over:]...)
	}
	window := w.recent
	if len(window) > p.UsageWait+1 {
		window = window[1:]
	}
	w.grown = make(map[string]float64, len(r.PerUser))
	for u := range r.PerUser {
		for _, x := range window {
			w.grown[u] += x.grown[u]
		}
	}
	for i, res := range allResources {
		if w.hot[i] && !w.shows(res) {
			w.unseen[i]++
		} else {
			w.unseen[i] = 0
		}
	}
}

// weight is what user u of w consumed of res recently, their weight in the
// draw of who leaves: for memory, what they grew over w's last UsageWait+1
// readings (a burst seen a reading before the worker's heap is not lost);
// for the other resources, the last reading's figure.
func (w *worker) weight(u string, res Resource) float64 {
	if res == Memory {
		return w.grown[u]
	}
	return w.last.PerUser[u].weight(res)
}

// consumed sums the weights of w's people for res.
func (w *worker) consumed(res Resource) float64 {
	var total float64
	for u := range w.last.PerUser {
		total += w.weight(u, res)
	}
	return total
}

// rise is how much w's memory rose over its kept readings: from the lowest
// to the last (0 with one reading).
func (w *worker) rise() float64 {
	if len(w.recent) == 0 {
		return 0
	}
	low := w.recent[0].mem
	for _, x := range w.recent {
		low = min(low, x.mem)
	}
	return w.recent[len(w.recent)-1].mem - low
}

// shows reports whether w's people's numbers show the consumption behind
// its level of res: someone consumed some, and for memory their growth
// makes at least a quarter of the worker's rise over the same readings (a
// heap that jumped while nobody's growth is counted yet does not show who
// grew). A quarter, not all: a worker's heap grows by more than the bytes
// written into trees (a page of 8 MiB raised a worker's live heap by 23 MiB).
func (w *worker) shows(res Resource) bool {
	total := w.consumed(res)
	if total <= 0 {
		return false
	}
	return res != Memory || 4*total >= w.rise()
}

// unshown explains, for reasons, what w's people showed of res against the
// worker's level.
func (w *worker) unshown(res Resource) string {
	if res == Memory && w.rise() > 0 {
		return fmt.Sprintf("its people grew %s of its %s rise", quantity(Memory, w.consumed(Memory)), quantity(Memory, w.rise()))
	}
	return fmt.Sprintf("nobody on %s had %s", w.name, consumption(res))
}
