module idemgate.test/go_mux

go 1.19
