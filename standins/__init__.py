"""Stand-ins for the parts a CPU machine lacks, for the tests and the call-overhead benchmark; no example,
launcher or experiment imports them:

- `fake_vllm_server`: an OpenAI-compatible server that answers as a vLLM engine answers Trinity
  (token ids and logprobs), its replies chosen by a function of the request;
- `adapter_harness`: a tuner workflow run inside Trinity's adapter, as tune() runs it, against any
  OpenAI-compatible address."""
