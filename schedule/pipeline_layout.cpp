#include "schedule/pipeline_layout.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <regex>
#include <sstream>

#include "core/display_text.h"
#include "core/errors.h"

namespace bitparity {
namespace {

// A layout longer than this is a typo, not a model (Megatron's largest are a few hundred).
constexpr size_t kMaxLetters = 1 << 16;

std::string Repeat(const std::string& piece, const std::string& count, const std::string& text) {
  const size_t n = count.size() > 6 ? kMaxLetters + 1 : std::stoul(count);
  if (n * piece.size() > kMaxLetters) {
    throw InputError("\"" + text + "\" repeats \"" + piece + "\" " + count +
                     " times: longer than " + std::to_string(kMaxLetters) + " letters");
  }
  std::string out;
  for (size_t i = 0; i < n; ++i) out += piece;
  return out;
}

// Every match of `pattern` replaced by its group 1 repeated group 2 times (Python's re.sub).
std::string ExpandAll(const std::string& in, const std::regex& pattern, const std::string& text) {
  std::string out;
  auto begin = std::sregex_iterator(in.begin(), in.end(), pattern);
  size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out += in.substr(last, static_cast<size_t>(m.position(0)) - last);
    out += Repeat(m[1].str(), m[2].str(), text);
    last = static_cast<size_t>(m.position(0) + m.length(0));
    if (out.size() > kMaxLetters) {
      throw InputError("\"" + text + "\" is longer than " + std::to_string(kMaxLetters) +
                       " letters once its repetitions are written out");
    }
  }
  return out + in.substr(last);
}

// `s` in quotes as a message shows it (core/display_text.h), a long layout cut after
// kShownLetters letters (on a character boundary) with its length.
constexpr size_t kShownLetters = 60;
std::string Quoted(const std::string& s) {
  size_t shown = 0;
  while (shown < s.size() && shown < kShownLetters) {
    shown += std::max<size_t>(1, Utf8CharacterLength(s, shown));
  }
  std::string out = "\"" + EscapedText(s.substr(0, shown), /*keep_whitespace=*/false) + "\"";
  if (shown < s.size()) out.insert(out.size() - 1, "...");
  if (shown < s.size()) out += " (" + std::to_string(s.size()) + " characters)";
  return out;
}

// The character at `s[i]` named for a message: 'x', or a control byte or a non-ASCII character
// by its code ("'\x00' (a control character)", "U+00A0 (not an ASCII letter)").
std::string LetterName(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c >= 0x20 && c < 0x7F) return "'" + std::string(1, s[i]) + "'";
  if (c < 0x80) return Quoted(std::string(1, s[i])) + " (a control character)";
  const size_t n = Utf8CharacterLength(s, i);
  char hex[16];
  if (n == 0) {
    std::snprintf(hex, sizeof(hex), "byte 0x%02X", static_cast<unsigned>(c));
    return std::string(hex) + " (not UTF-8)";
  }
  uint32_t code = c & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) code = (code << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  std::snprintf(hex, sizeof(hex), "U+%04X", static_cast<unsigned>(code));
  return std::string(hex) + " (not an ASCII letter)";
}

}  // namespace

std::string ExpandPipelineLayout(const std::string& text) {
  std::string s;
  for (char c : text) {
    if (c != ',') s += c;
  }
  static const std::regex group(R"(\(([^()]+)\)\*(\d+))");
  static const std::regex letter(R"(([^()*])\*(\d+))");
  s = ExpandAll(s, group, text);
  s = ExpandAll(s, letter, text);
  if (s.find_first_of("()*") != std::string::npos) {
    throw InputError(Quoted(text) +
                     " has a repetition that is not \"(stages)*n\" or \"letter*n\" (nested or "
                     "unbalanced parentheses, or '*' without a count)");
  }
  return s;
}

std::string PipelineStage::Contents() const {
  std::string parts;
  auto add = [&](const std::string& part) { parts += (parts.empty() ? "" : " ") + part; };
  if (embedding) add("E");
  for (int64_t l = 0; l < layers; ++l) add("t" + std::to_string(first_layer + l));
  for (int64_t d = 0; d < mtp_layers; ++d) add("m" + std::to_string(first_mtp + d));
  if (loss) add("L");
  return parts.empty() ? "empty" : parts;
}

int64_t PipelineLayout::ActivationParts(int64_t index) const {
  int64_t parts = 1;
  for (const PipelineStage& s : stages) {
    if (s.index < index) parts += s.mtp_layers;
  }
  return parts;
}

int64_t PipelineLayout::ActivationWidth(int64_t index, int64_t hidden,
                                        int64_t residual_width) const {
  for (const PipelineStage& s : stages) {
    if (s.index < index && s.final_norm) return hidden;
  }
  return residual_width;
}

std::string PipelineLayout::Text() const {
  std::string out;
  for (const PipelineStage& s : stages) {
    if (s.index > 0) out += "|";
    if (s.embedding) out += "E";
    out += std::string(static_cast<size_t>(s.layers), 't');
    out += std::string(static_cast<size_t>(s.mtp_layers), 'm');
    if (s.loss) out += "L";
  }
  return out;
}

std::vector<std::string> PipelineLayout::Describe() const {
  std::vector<std::string> lines;
  for (int64_t r = 0; r < pp; ++r) {
    std::ostringstream line;
    line << "rank " << r << ":";
    for (int64_t c = 0; c < vpp; ++c) line << " [" << stage(r, c).Contents() << "]";
    lines.push_back(line.str());
  }
  return lines;
}

namespace {

// What the letters of the stages placed so far hold.
struct LetterCounts {
  int64_t decoder = 0;
  int64_t mtp = 0;
  int64_t embeddings = 0;
  int64_t losses = 0;
  int64_t mtp_stages = 0;
};

// Stage `i` of `count` from its letters; `counts` holds the earlier stages' letters.
PipelineStage PlaceStage(const std::string& stage_letters, const std::string& text, int64_t i,
                         int64_t count, int64_t pp, LetterCounts& counts) {
  PipelineStage s;
  s.index = i;
  s.pp_rank = i % pp;
  s.chunk = i / pp;
  s.first_layer = counts.decoder;
  s.first_mtp = counts.mtp;
  const std::string where = "stage " + std::to_string(i) + " (" + Quoted(stage_letters) + ")";
  for (size_t j = 0; j < stage_letters.size(); ++j) {
    const char c = stage_letters[j];
    switch (c) {
      case 'E':
        if (counts.embeddings > 0) {
          throw InputError(Quoted(text) + " has 'E' twice (again in " + where +
                           "): the model has one embedding, first in the first stage");
        }
        if (i != 0 || j != 0) {
          throw InputError(Quoted(text) + " has 'E' in " + where +
                           ": the embedding comes first in the first stage");
        }
        s.embedding = true;
        ++counts.embeddings;
        break;
      case 't':
        if (counts.mtp > 0) {
          throw InputError(Quoted(text) + " has a decoder layer 't' after an MTP layer 'm' in " +
                           where + ": decoder layers come before MTP layers");
        }
        ++s.layers;
        ++counts.decoder;
        break;
      case 'm':
        ++s.mtp_layers;
        ++counts.mtp;
        break;
      case 'L':
        if (i != count - 1 || j + 1 != stage_letters.size()) {
          throw InputError(Quoted(text) + " has 'L' in " + where +
                           ": the loss comes last in the last stage");
        }
        s.loss = true;
        ++counts.losses;
        break;
      default:
        throw InputError(Quoted(text) + " has an unknown letter " + LetterName(stage_letters, j) +
                         " in " + where +
                         "; the letters are E (embedding), t (decoder layer), m (MTP layer), L "
                         "(loss), with '|' between stages");
    }
  }
  if (s.mtp_layers > 0) ++counts.mtp_stages;
  return s;
}

// The whole layout's letters against the model: one embedding, one loss, every layer once.
void CheckLetterCounts(const LetterCounts& counts, const std::string& text, int64_t layers,
                       int64_t mtp_layers) {
  if (counts.embeddings != 1) {
    throw InputError(Quoted(text) +
                     " must hold 'E' (the embedding) once, first in the first stage");
  }
  if (counts.losses != 1) {
    throw InputError(Quoted(text) + " must hold 'L' (the loss) once, last in the last stage");
  }
  if (counts.decoder != layers) {
    throw InputError(Quoted(text) + " has " + std::to_string(counts.decoder) +
                     " decoder layers 't', but [model] layers = " + std::to_string(layers));
  }
  if (counts.mtp != mtp_layers) {
    throw InputError(Quoted(text) + " has " + std::to_string(counts.mtp) +
                     " MTP layers 'm', but [model] mtp_layers = " + std::to_string(mtp_layers));
  }
  if (counts.mtp_stages > 1) {
    throw InputError(Quoted(text) + " spreads its MTP layers over " +
                     std::to_string(counts.mtp_stages) + " stages: every 'm' must be in one stage");
  }
}

// Places the stages (given as their letters) and checks Megatron's rules.
PipelineLayout Build(const std::vector<std::string>& letters, const std::string& text, int64_t pp,
                     int64_t layers, int64_t mtp_layers) {
  const int64_t count = static_cast<int64_t>(letters.size());
  if (count % pp != 0) {
    throw InputError(Quoted(text) + " has " + std::to_string(count) +
                     " stages, not a multiple of [parallel] pp = " + std::to_string(pp) +
                     " (the stages are the model chunks of every pipeline rank, chunk 0 of each "
                     "rank first: pp x vpp of them)");
  }
  PipelineLayout layout;
  layout.pp = pp;
  layout.vpp = count / pp;
  LetterCounts counts;
  for (int64_t i = 0; i < count; ++i) {
    layout.stages.push_back(
        PlaceStage(letters[static_cast<size_t>(i)], text, i, count, pp, counts));
  }
  CheckLetterCounts(counts, text, layers, mtp_layers);
  for (PipelineStage& s : layout.stages) {
    if (s.mtp_layers > 0 && s.chunk != layout.vpp - 1) {
      throw InputError(Quoted(text) + " has MTP layers in chunk " + std::to_string(s.chunk) +
                       " of pipeline rank " + std::to_string(s.pp_rank) +
                       ": they must be in a rank's last chunk (" + std::to_string(layout.vpp - 1) +
                       ")");
    }
    const bool holds_last_layer = s.layers > 0 && s.first_layer + s.layers == layers;
    s.final_norm = mtp_layers > 0 ? holds_last_layer : s.loss;
  }
  return layout;
}

}  // namespace

PipelineLayout ParsePipelineLayout(const std::string& text, int64_t pp, int64_t layers,
                                   int64_t mtp_layers) {
  const std::string expanded = ExpandPipelineLayout(text);
  std::vector<std::string> letters;
  std::string current;
  for (char c : expanded) {
    if (c == '|') {
      letters.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  letters.push_back(current);
  return Build(letters, text, pp, layers, mtp_layers);
}

PipelineLayout EvenPipelineLayout(int64_t pp, int64_t vpp, int64_t layers, int64_t mtp_layers) {
  const int64_t stages = pp * vpp;
  if (layers % stages != 0) {
    // The same layers placed unevenly, the extra ones on the first stages.
    std::string example;
    for (int64_t i = 0; i < stages; ++i) {
      const int64_t n = layers / stages + (i < layers % stages ? 1 : 0);
      if (i > 0) example += "|";
      if (i == 0) example += "E";
      example += std::string(static_cast<size_t>(n), 't');
      if (i == stages - 1) example += std::string(static_cast<size_t>(mtp_layers), 'm') + "L";
    }
    throw InputError("[model] layers = " + std::to_string(layers) +
                     " does not split evenly over [parallel] pp x vpp = " + std::to_string(pp) +
                     " x " + std::to_string(vpp) + " = " + std::to_string(stages) +
                     " stages; make layers a multiple of " + std::to_string(stages) +
                     " or place the layers with [model] pipeline_layout, e.g. \"" + example + "\"");
  }
  std::vector<std::string> letters(static_cast<size_t>(stages));
  for (int64_t i = 0; i < stages; ++i) {
    std::string& s = letters[static_cast<size_t>(i)];
    if (i == 0) s += "E";
    s += std::string(static_cast<size_t>(layers / stages), 't');
    if (i == stages - 1) s += std::string(static_cast<size_t>(mtp_layers), 'm') + "L";
  }
  return Build(letters, "", pp, layers, mtp_layers);
}

PipelineLayout WithFinalNormOnTheMtpStage(PipelineLayout layout) {
  const bool has_mtp = std::any_of(layout.stages.begin(), layout.stages.end(),
                                   [](const PipelineStage& s) { return s.mtp_layers > 0; });
  if (!has_mtp) return layout;
  for (PipelineStage& s : layout.stages) s.final_norm = s.mtp_layers > 0 && s.first_mtp == 0;
  return layout;
}

}  // namespace bitparity
