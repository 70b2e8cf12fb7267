#pragma once
// Training data for the language-model examples: a byte-level tokenizer,
// loaders for plain text files and nanoGPT-style token directories, the Brown
// corpus (tag stripping), a synthetic order-2 Markov language whose entropy
// rate is known exactly, and deterministic batch samplers.
//
// Everything here is deterministic and portable: random numbers come from
// splitmix64 (never from <random>'s distributions, whose output differs between
// standard libraries), and binary files are decoded byte by byte as
// little-endian regardless of the host.
//
// One header per part: token_data.hpp (TokenData, the shared helpers), corpus.hpp
// (tokenizer, loaders, Brown), synthetic.hpp and batches.hpp; this one includes them all.
#include "normlab/train/token_data.hpp"
#include "normlab/train/corpus.hpp"
#include "normlab/train/synthetic.hpp"
#include "normlab/train/batches.hpp"
