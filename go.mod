module github.com/vkattn/vkattn

go 1.25

require (
	codeberg.org/sbinet/npyio v0.14.0
	github.com/vulkan-go/vulkan v0.0.0-20221209234627-c0a353ae26c8
)

require (
	github.com/campoy/embedmd v1.0.0 // indirect
	github.com/nlpodyssey/gopickle v0.3.0 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	golang.org/x/text v0.34.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
)
