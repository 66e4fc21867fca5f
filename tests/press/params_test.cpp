// Press option and trigger parsing: every value is typed, finite and in range, or refused with a
// message naming the press, the option, the value and what is allowed.
#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "core/error.h"
#include "press/params.h"
#include "press/registry.h"

namespace kvs {
namespace {

using T = ParamSpec::Type;

// The message of the kvs::Error `fn` throws ("" when it does not throw).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::vector<ParamSpec> kSpecs = {
    {"n", T::Int, "5", "an int", 1, 100},
    {"free_int", T::Int, "0", "an int with no range"},
    {"x", T::Float, "0.5", "a fraction", 0, 1},
    {"y", T::Float, "2", "unbounded float"},
    {"flag", T::Bool, "false", "a flag"},
    {"s", T::String, "abc", "a string"},
};

TEST(Params, DefaultsAndGivenValuesParse) {
  const Params p("t", kSpecs, {{"n", "100"}, {"x", "1"}, {"flag", "on"}, {"y", "-3.5e2"}});
  EXPECT_EQ(p.get_int("n"), 100);
  EXPECT_EQ(p.get_int("free_int"), 0);
  EXPECT_EQ(p.get_float("x"), 1.0);
  EXPECT_EQ(p.get_float("y"), -350.0);
  EXPECT_TRUE(p.get_bool("flag"));
  EXPECT_EQ(p.get_str("s"), "abc");
  EXPECT_EQ(Params("t", kSpecs, {{"n", "1"}}).get_int("n"), 1);  // both bounds inclusive
  EXPECT_EQ(Params("t", kSpecs, {{"x", "0"}}).get_float("x"), 0.0);
}

TEST(Params, IntegersRefusedOutOfRangeOverflowingOrMalformed) {
  for (const char* v : {"0", "101", "-1", "4294967296", "4294967301", "9223372036854775807",
                        "9223372036854775808", "-9223372036854775809", "99999999999999999999999", "1.5", "1e3",
                        "", " 5", "5 ", "+5", "0x10", "five", "nan", "inf"}) {
    const std::string msg = error_of([&] { Params("mypress", kSpecs, {{"n", v}}); });
    EXPECT_NE(msg.find("press 'mypress': option n must be an integer in 1..100"), std::string::npos) << v << ": " << msg;
    EXPECT_NE(msg.find(std::string("got '") + v + "'"), std::string::npos) << msg;
  }
}

TEST(Params, UnrangedIntegersMustStillFitAnInt) {
  EXPECT_EQ(Params("t", kSpecs, {{"free_int", "2147483647"}}).get_int("free_int"), INT_MAX);
  EXPECT_EQ(Params("t", kSpecs, {{"free_int", "-2147483648"}}).get_int("free_int"), INT_MIN);
  for (const char* v : {"2147483648", "-2147483649", "4294967296"})
    EXPECT_NE(error_of([&] { Params("t", kSpecs, {{"free_int", v}}); }).find("in -2147483648..2147483647"),
              std::string::npos)
        << v;
}

TEST(Params, FloatsMustBeFiniteAndInRange) {
  for (const char* v : {"nan", "NaN", "-nan", "inf", "-inf", "infinity", "1e999", "-1e999", "1.0000001", "-0.1", "",
                        "0.5x", " 0.5", "0x1p-1"}) {
    const std::string msg = error_of([&] { Params("p", kSpecs, {{"x", v}}); });
    EXPECT_NE(msg.find("press 'p': option x must be a finite number in [0, 1]"), std::string::npos) << v << ": " << msg;
  }
  // Unbounded floats are still finite.
  for (const char* v : {"nan", "inf", "1e400"})
    EXPECT_NE(error_of([&] { Params("p", kSpecs, {{"y", v}}); }).find("must be a finite number"), std::string::npos) << v;
  EXPECT_EQ(Params("p", kSpecs, {{"y", "1e300"}}).get_float("y"), 1e300);
  EXPECT_EQ(Params("p", kSpecs, {{"x", "1e-300"}}).get_float("x"), 1e-300);
}

TEST(Params, BoolsUnknownKeysAndDefaults) {
  for (const char* v : {"yes", "1", "true", "on"}) EXPECT_TRUE(Params("p", kSpecs, {{"flag", v}}).get_bool("flag"));
  for (const char* v : {"no", "0", "false", "off"}) EXPECT_FALSE(Params("p", kSpecs, {{"flag", v}}).get_bool("flag"));
  EXPECT_NE(error_of([] { Params("p", kSpecs, {{"flag", "maybe"}}); }).find("option flag must be true or false, got 'maybe'"),
            std::string::npos);
  EXPECT_NE(error_of([] { Params("p", kSpecs, {{"nope", "1"}}); }).find("press 'p' has no option 'nope'"), std::string::npos);
  // A default outside its own range is a spec bug, reported at the first use.
  const std::vector<ParamSpec> bad = {{"k", T::Int, "0", "", 1, 10}};
  EXPECT_NE(error_of([&] { Params("p", bad, {}); }).find("(the default)"), std::string::npos);
}

TEST(Params, ScalarParsersAreStrict) {
  EXPECT_EQ(parse_int64("-42"), -42);
  EXPECT_EQ(parse_int64("9223372036854775807"), INT64_MAX);
  EXPECT_FALSE(parse_int64("9223372036854775808"));  // ERANGE
  EXPECT_FALSE(parse_int64("12abc"));
  EXPECT_EQ(parse_finite_double("2.5"), 2.5);
  EXPECT_FALSE(parse_finite_double("1e309"));
  EXPECT_FALSE(parse_finite_double("nan"));
  EXPECT_EQ(parse_bool_word("off"), false);
  EXPECT_FALSE(parse_bool_word("2"));
}

TEST(Params, RegistrySpecsRefuseNanOverflowAndOutOfRange) {
  struct Case {
    const char* press;
    const char* key;
    const char* value;
  };
  for (const Case& c : std::vector<Case>{{"h2o", "recent_fraction", "nan"},
                                         {"h2o", "recent_fraction", "1.5"},
                                         {"h2o", "decode_every", "4294967296"},
                                         {"h2o", "decode_every", "-1"},
                                         {"h2o", "decode_every", "1000001"},
                                         {"tova", "decode_every", "4294967296"},
                                         {"pyramidkv", "beta", "nan"},
                                         {"pyramidkv", "beta", "0.5"},
                                         {"pyramidkv", "beta", "inf"},
                                         {"adakv", "alpha", "nan"},
                                         {"adakv", "alpha", "-0.1"},
                                         {"snapkv", "window_size", "0"},
                                         {"snapkv", "window_size", "4097"},
                                         {"snapkv", "kernel_size", "103"},
                                         {"snapkv", "kernel_size", "4"},
                                         {"snapkv", "pooling", "median"}}) {
    const std::string msg = error_of([&] { make_press(c.press, {{c.key, c.value}}); });
    EXPECT_NE(msg.find(c.press), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.key), std::string::npos) << c.press << " " << c.key << "=" << c.value << ": " << msg;
  }
  // Every registered press builds with its defaults (each default is inside its own range).
  for (const auto& info : press_registry()) EXPECT_NO_THROW(make_press(info.name)) << info.name;
  EXPECT_EQ(make_press("h2o", {{"decode_every", "1000000"}}).trigger.every_n, 1000000);
}

TEST(Params, ParseParamsRefusesMalformedAndDuplicates) {
  EXPECT_EQ(parse_params({"a=1", "b=", "c=x=y"}), (ParamMap{{"a", "1"}, {"b", ""}, {"c", "x=y"}}));
  EXPECT_NE(error_of([] { parse_params({"novalue"}); }).find("must look like key=value"), std::string::npos);
  EXPECT_NE(error_of([] { parse_params({"=1"}); }).find("must look like key=value"), std::string::npos);
  EXPECT_NE(error_of([] { parse_params({"a=1", "a=2"}); }).find("'a' is given twice"), std::string::npos);
}

TEST(Trigger, EveryNInRangeWithoutWrapping) {
  EXPECT_EQ(parse_trigger("prefill").kind, Trigger::Kind::OnPrefill);
  EXPECT_EQ(parse_trigger("every:1").every_n, 1);
  EXPECT_EQ(parse_trigger("every:1000000").every_n, 1000000);
  for (const char* s : {"every:0", "every:-1", "every:1000001", "every:4294967296", "every:4294967297",
                        "every:18446744073709551616", "every:99999999999999999999", "every:", "every", "every:1.5",
                        "every: 4", "every:4 ", "every:+4", "every:nan", "Every:4", "prefill:1", "", ":"})
    EXPECT_THROW(parse_trigger(s), Error) << s;
  EXPECT_NE(error_of([] { parse_trigger("every:4294967296"); }).find("1..1000000"), std::string::npos);
}

TEST(Trigger, MemoryBytesFiniteAndBounded) {
  EXPECT_EQ(parse_trigger("memory:64M").cap_bytes, size_t{64} << 20);
  EXPECT_EQ(parse_trigger("memory:1").cap_bytes, 1u);
  EXPECT_EQ(parse_trigger("memory:1.5k").cap_bytes, 1536u);
  EXPECT_EQ(parse_trigger("memory:2G").cap_bytes, size_t{2} << 30);
  EXPECT_EQ(parse_trigger("memory:1048576G").cap_bytes, size_t{1} << 50);  // exactly 2^50
  for (const char* s : {"memory:0", "memory:0.5", "memory:-1", "memory:nan", "memory:inf", "memory:1e999",
                        "memory:1e999K", "memory:infG", "memory:nanM", "memory:1048577G", "memory:1e16",
                        "memory:", "memory", "memory:K", "memory:64T", "memory:64MB", "memory: 64M", "memory:0x40"})
    EXPECT_THROW(parse_trigger(s), Error) << s;
  EXPECT_NE(error_of([] { parse_trigger("memory:64T"); }).find("unknown size suffix 'T'"), std::string::npos);
}

}  // namespace
}  // namespace kvs
