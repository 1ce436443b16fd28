package benchkit

import (
	"sync"
	"sync/atomic"
)

// ForEach calls f(0) … f(n-1), at most conc calls at a time, and returns
// the first error; once a call has failed, no new one starts.
func ForEach(n, conc int, f func(i int) error) error {
	var (
		next   atomic.Int64
		failed atomic.Bool
		once   sync.Once
		first  error // set once, before failed
		wg     sync.WaitGroup
	)
	for range min(conc, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err; failed.Store(true) })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
