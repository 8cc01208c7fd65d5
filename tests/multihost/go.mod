module adam.dev/tests/multihost

go 1.26.0
