// Go net/http ServeMux: an upstream of the differential path test
// (crates/idemgate-gateway/tests/integration/differential.rs). Go 1.19's ServeMux has no
// method patterns, so the handlers check the method, and it answers 301 itself to a path
// with `//` or dot segments (its cleaned form).
//
// POST /charges and POST /a/charges each count one execution under the pattern ServeMux
// matched. Every POST that reaches the server, routed or not, is recorded first as an arrival
// with its request target as received. GET /counts returns both and the Go version.
//
//	go build -o go_mux . && ./go_mux PORT
package main

import (
	"encoding/json"
	"log"
	"net/http"
	"os"
	"runtime"
	"sync"
)

type counts struct {
	mu         sync.Mutex
	Executions map[string]int `json:"executions"`
	Arrivals   []string       `json:"arrivals"`
	Server     string         `json:"server"`
}

// execute counts one execution of pattern for each POST it receives.
func (c *counts) execute(pattern string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		c.mu.Lock()
		c.Executions[pattern]++
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]string{"executed": pattern})
	}
}

func (c *counts) show(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(c)
}

// recordArrivals records each POST before ServeMux routes it.
func (c *counts) recordArrivals(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			c.mu.Lock()
			c.Arrivals = append(c.Arrivals, r.RequestURI)
			c.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

func main() {
	c := &counts{Executions: map[string]int{}, Arrivals: []string{}, Server: "Go " + runtime.Version() + " net/http ServeMux"}
	mux := http.NewServeMux()
	mux.HandleFunc("/charges", c.execute("/charges"))
	mux.HandleFunc("/a/charges", c.execute("/a/charges"))
	mux.HandleFunc("/counts", c.show)
	log.Fatal(http.ListenAndServe("127.0.0.1:"+os.Args[1], c.recordArrivals(mux)))
}
