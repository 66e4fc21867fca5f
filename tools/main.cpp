// kvshrink: command-line entry point. Each subcommand lives in its own cmd_*.cpp file.
//
// The error boundary: whatever a subcommand throws becomes one line "kvshrink: error: ..." on
// stderr and exit code 1 (CLI11's own usage errors keep CLI11's output and exit codes). A
// terminate handler covers what cannot reach this boundary (an exception escaping a worker
// thread), so no input ends in std::terminate's abort.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <new>
#include <stdexcept>
#include <string>

#include "cli_common.h"
#include "core/error.h"

namespace {

[[noreturn]] void die(const std::string& msg) {
  std::fflush(stdout);
  std::fprintf(stderr, "kvshrink: error: %s\n", msg.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

// Describes an in-flight exception (std::current_exception()) in one line.
std::string describe(std::exception_ptr ep) {
  try {
    std::rethrow_exception(ep);
  } catch (const kvs::Error& e) {
    return e.what();
  } catch (const std::bad_alloc&) {
    return "out of memory";
  } catch (const nlohmann::json::exception& e) {
    return std::string("malformed JSON: ") + e.what();
  } catch (const std::filesystem::filesystem_error& e) {
    return e.what();  // "filesystem error: <op>: <reason> [<path>]"
  } catch (const std::length_error& e) {
    return std::string("a size is out of range (") + e.what() + ")";
  } catch (const std::exception& e) {
    return std::string("internal error: ") + e.what();
  } catch (...) {
    return "internal error: unknown exception";
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::set_terminate([] {
    const std::exception_ptr ep = std::current_exception();
    die(ep ? describe(ep) : "internal error: terminate called without an exception");
  });

  CLI::App app{"kvshrink: LLM inference with a compressible KV cache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvshrink 0.1.0");
  kvs::cli::register_generate(app);
  kvs::cli::register_tokenize(app);
  kvs::cli::register_info(app);
  kvs::cli::register_bench(app);
  kvs::cli::register_make_model(app);
  kvs::cli::register_convert(app);
  kvs::cli::register_run(app);
  kvs::cli::register_compress(app);
  kvs::cli::register_presses(app);
  kvs::cli::register_bench_press(app);
  kvs::cli::register_bench_memory(app);
  kvs::cli::register_bench_kernels(app);
  kvs::cli::register_eval(app);
  kvs::cli::register_calibrate(app);
  kvs::cli::register_serve(app);
  kvs::cli::register_inspect(app);
  kvs::cli::register_logits(app);
  kvs::cli::register_devices(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (...) {
    const std::string msg = describe(std::current_exception());
    std::fflush(stdout);
    std::fprintf(stderr, "kvshrink: error: %s\n", msg.c_str());
    return 1;
  }
  return 0;
}
