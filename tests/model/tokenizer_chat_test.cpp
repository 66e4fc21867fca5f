// Chat template families: detection from the Jinja source and exact renderings.
#include "tokenizer_test_util.h"

namespace kvs {
namespace {

using Msgs = std::vector<ChatMessage>;

std::unique_ptr<Tokenizer> with_template(const std::string& tmpl, std::vector<std::string> extra = {}) {
  VocabSpec s;
  s.tokens = {"<unk>", "<s>", "</s>", "a"};
  s.types = {2, 3, 3, 1};
  for (auto& e : extra) {  // extra tokens are control tokens
    s.tokens.push_back(std::move(e));
    s.types.push_back(3);
  }
  s.bos = 1, s.eos = 2, s.unk = 0;
  s.chat_template = tmpl;
  return Tokenizer::create(std::move(s));
}

// As shipped in SmolLM2-135M-Instruct's tokenizer_config.json (newlines are real newlines).
const std::string kSmolLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' "
    "}}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// Qwen2.5 style: the default system turn written with \n escapes inside the Jinja literal.
const std::string kQwen =
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
    "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You "
    "are a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}...{%- endfor %}";

const std::string kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

const std::string kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = "
    "'<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = "
    "message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
    "content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}";

const std::string kMistral =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
    "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + "
    "eos_token}}{% endif %}{% endfor %}";

TEST(TokChat, ChatMLWithDefaultSystemTurn) {
  auto t = with_template(kSmolLM2);
  EXPECT_EQ(t->chat_format(), ChatFormat::ChatML);
  EXPECT_EQ(t->apply_chat_template({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t->apply_chat_template({{"system", "Be terse."}, {"user", "Hi"}, {"assistant", "Hello"}}, false),
            "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n");
  auto q = with_template(kQwen);
  EXPECT_EQ(q->apply_chat_template({{"user", "2+2?"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
}

TEST(TokChat, ChatMLWithoutTemplateFromVocabulary) {
  const auto& t = test::smollm2_tokenizer();
  EXPECT_EQ(t.chat_format(), ChatFormat::ChatML);
  const std::string p = t.apply_chat_template({{"user", "What is the capital of France?"}}, true);
  EXPECT_EQ(p, "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = t.encode(p, true, true);
  EXPECT_EQ(ids.front(), 1);  // <|im_start|> as one special token
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
}

TEST(TokChat, Llama3) {
  auto t = with_template(kLlama3);
  EXPECT_EQ(t->chat_format(), ChatFormat::Llama3);
  // Contents are trimmed (| trim); BOS is left to the tokenizer.
  EXPECT_EQ(t->apply_chat_template({{"system", " Be brief. "}, {"user", "Hi\n"}, {"assistant", "Hello!"}}, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(t->apply_chat_template({{"user", "x"}}, false), "<|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
}

// As shipped in Phi-3-mini-4k-instruct's tokenizer_config.json (newlines written as \n in Jinja).
const std::string kPhi3 =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + "
    "'<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif "
    "message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor "
    "%}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

TEST(TokChat, Phi3) {
  auto t = with_template(kPhi3, {"<|assistant|>", "<|end|>", "<|user|>", "<|system|>"});
  EXPECT_EQ(t->chat_format(), ChatFormat::Phi3);
  EXPECT_EQ(t->apply_chat_template({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}}, true),
            "<|system|>\nBe brief.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n<|assistant|>\n");
  // No template string but Phi-3's tokens in the vocabulary (a random-weight phi-3 shape): the same.
  auto v = with_template("", {"<|assistant|>", "<|end|>"});
  EXPECT_EQ(v->chat_format(), ChatFormat::Phi3);
  EXPECT_EQ(v->apply_chat_template({{"user", "x"}}, true), "<|user|>\nx<|end|>\n<|assistant|>\n");
  EXPECT_TRUE(t->is_eog(5));  // <|end|> ends generation
}

TEST(TokChat, Llama2WithSystem) {
  auto t = with_template(kLlama2);
  EXPECT_EQ(t->chat_format(), ChatFormat::Llama2);
  EXPECT_EQ(t->apply_chat_template({{"system", "S"}, {"user", "U1 "}, {"assistant", "A1"}, {"user", "U2"}}, true),
            "[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]");
}

TEST(TokChat, MistralInst) {
  auto t = with_template(kMistral);
  EXPECT_EQ(t->chat_format(), ChatFormat::Llama2);
  EXPECT_EQ(t->apply_chat_template({{"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}}, true),
            "[INST] U1 [/INST]A1</s>[INST] U2 [/INST]");
}

TEST(TokChat, NoTemplateIsPlainConcatenation) {
  auto t = with_template("");
  EXPECT_EQ(t->chat_format(), ChatFormat::None);
  EXPECT_EQ(t->apply_chat_template({{"user", "Once upon"}, {"assistant", " a time"}}, true), "Once upon a time");
  auto unknown = with_template("{% for m in messages %}<|user|>{{ m.content }}{% endfor %}");
  EXPECT_EQ(unknown->chat_format(), ChatFormat::None);
  auto vocab_chatml = with_template("", {"<|im_start|>", "<|im_end|>"});
  EXPECT_EQ(vocab_chatml->chat_format(), ChatFormat::ChatML);
}

TEST(TokChat, EndOfGenerationTokens) {
  auto t = with_template(kLlama3, {"<|eot_id|>", "<|start_header_id|>", "<|im_end|>"});
  EXPECT_TRUE(t->is_eog(2));   // eos
  EXPECT_TRUE(t->is_eog(4));   // <|eot_id|> (control)
  EXPECT_FALSE(t->is_eog(5));  // <|start_header_id|>
  EXPECT_TRUE(t->is_eog(6));   // <|im_end|>
  EXPECT_FALSE(t->is_eog(3));
}

}  // namespace
}  // namespace kvs
