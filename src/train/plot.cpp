// Training-curve SVG renderer (see plot.h). Plain string building: the output must open in any
// browser with nothing else installed. Tested by tests/train/plot_test.cpp.
#include "train/plot.h"

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/output_file.h"

namespace dflash {

namespace {

using nlohmann::json;

constexpr double kWidth = 960, kPanelH = 300, kLeft = 80, kRight = 200, kTop = 56, kGap = 80;
constexpr std::array<const char*, 6> kColours = {"#1f77b4", "#d62728", "#2ca02c",
                                                 "#9467bd", "#ff7f0e", "#8c564b"};
constexpr const char* kEvalColour = "#ff7f0e";

std::optional<double> number_or_null(const json& j, const char* key, std::string_view where) {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    DF_CHECK(j[key].is_number(), "{}: \"{}\" is {}; expected a number (or null)", where, key,
             j[key].dump());
    return j[key].get<double>();
}

MetricsRecord parse_record(std::string_view line, std::string_view where) {
    json j;
    try {
        j = json::parse(line.begin(), line.end());
    } catch (const json::parse_error& e) {
        DF_FAIL("{}: not valid JSON ({}); metrics.jsonl holds one JSON object per line", where,
                e.what());
    }
    DF_CHECK(j.is_object(), "{}: the line is a JSON {}; expected an object", where, j.type_name());
    DF_CHECK(j.contains("step") && j["step"].is_number_integer(),
             "{}: no integer \"step\" (got {}); every metrics record names its step", where,
             j.contains("step") ? j["step"].dump() : std::string("nothing"));
    MetricsRecord r;
    r.step = j["step"].get<int64_t>();
    r.loss = number_or_null(j, "loss", where);
    if (j.contains("eval")) {
        DF_CHECK(j["eval"].is_boolean(), "{}: \"eval\" is {}; expected true or false", where,
                 j["eval"].dump());
        r.eval = j["eval"].get<bool>();
    }
    if (j.contains("acc") && !j["acc"].is_null()) {
        const json& a = j["acc"];
        DF_CHECK(a.is_array(),
                 "{}: \"acc\" is a JSON {}; expected an array (one accuracy per "
                 "block position 1..B-1)",
                 where, a.type_name());
        for (size_t k = 0; k < a.size(); ++k) {
            // A position without valid rows has no accuracy; NaN keeps the index aligned.
            DF_CHECK(a[k].is_number() || a[k].is_null(), "{}: \"acc\"[{}] is {}; expected a number",
                     where, k, a[k].dump());
            r.acc.push_back(a[k].is_null() ? std::nan("") : a[k].get<double>());
        }
    }
    return r;
}

std::string xml_escape(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

// Round tick values (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi) {
    const double raw = (hi - lo) / 5.0;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double norm = raw / mag;
    const double step = (norm < 1.5 ? 1.0 : norm < 3.0 ? 2.0 : norm < 7.0 ? 5.0 : 10.0) * mag;
    std::vector<double> t;
    for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
        t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    return t;
}

struct Range {
    double lo = 0, hi = 1;
    void widen_if_flat() {
        if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
            lo -= std::max(1.0, std::abs(lo) * 0.1);
            hi += std::max(1.0, std::abs(hi) * 0.1);
        }
    }
};

// One panel: maps data to pixels and draws axes, ticks, labels and series.
class Panel {
  public:
    Panel(double top, Range x, Range y) : top_(top), x_(x), y_(y) {}
    double px(double x) const { return kLeft + (x - x_.lo) / (x_.hi - x_.lo) * plot_w(); }
    double py(double y) const { return top_ + kPanelH - (y - y_.lo) / (y_.hi - y_.lo) * kPanelH; }

    void axes(std::string& out, std::string_view title, std::string_view ylabel) const {
        out += fmt::format(
            "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
            "stroke=\"#444\"/>\n",
            kLeft, top_, plot_w(), kPanelH);
        out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"panel-title\">{}</text>\n",
                           kLeft, top_ - 8, xml_escape(title));
        for (double t : nice_ticks(x_.lo, x_.hi)) {
            out += fmt::format(
                "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/>"
                "<text x=\"{0:.1f}\" y=\"{3:.1f}\" class=\"tick\" text-anchor=\"middle\">{4:g}"
                "</text>\n",
                px(t), top_, top_ + kPanelH, top_ + kPanelH + 16, t);
        }
        for (double t : nice_ticks(y_.lo, y_.hi)) {
            out += fmt::format(
                "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" class=\"grid\"/>"
                "<text x=\"{3:.1f}\" y=\"{4:.1f}\" class=\"tick\" text-anchor=\"end\">{5:g}"
                "</text>\n",
                kLeft, py(t), kLeft + plot_w(), kLeft - 6, py(t) + 4, t);
        }
        out += fmt::format(
            "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"axis-label\" text-anchor=\"middle\">step"
            "</text>\n",
            kLeft + plot_w() / 2, top_ + kPanelH + 36);
        const double ly = top_ + kPanelH / 2;
        out += fmt::format(
            "<text x=\"{0:.1f}\" y=\"{1:.1f}\" class=\"axis-label\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 {0:.1f} {1:.1f})\">{2}</text>\n",
            kLeft - 48, ly, xml_escape(ylabel));
    }

    // A polyline through the finite points, in order.
    void line(std::string& out, const std::vector<std::pair<double, double>>& pts,
              const char* colour, std::string_view cls) const {
        std::string coords;
        for (const auto& [x, y] : pts) {
            if (!std::isfinite(y)) continue;
            coords += fmt::format("{}{:.1f},{:.1f}", coords.empty() ? "" : " ", px(x), py(y));
        }
        out += fmt::format(
            "<polyline class=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
            "points=\"{}\"/>\n",
            cls, colour, coords);
    }

    void dots(std::string& out, const std::vector<std::pair<double, double>>& pts,
              const char* colour, std::string_view cls) const {
        for (const auto& [x, y] : pts) {
            if (!std::isfinite(y)) continue;
            out += fmt::format(
                "<circle class=\"{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\" "
                "stroke=\"#222\" stroke-width=\"0.5\"/>\n",
                cls, px(x), py(y), colour);
        }
    }

    // Legend entry `i` in the right margin: a line (or a dot) in `colour` and its text.
    void legend(std::string& out, int i, const char* colour, bool dot,
                std::string_view text) const {
        const double x = kLeft + plot_w() + 16, y = top_ + 14 + 20 * i;
        out += dot ? fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>",
                                 x + 12, y - 4, colour)
                   : fmt::format(
                         "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" "
                         "stroke=\"{}\" stroke-width=\"2\"/>",
                         x, y - 4, x + 24, y - 4, colour);
        out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">{}</text>\n", x + 32,
                           y, xml_escape(text));
    }

  private:
    static double plot_w() { return kWidth - kLeft - kRight; }
    double top_;
    Range x_, y_;
};

using Series = std::vector<std::pair<double, double>>;

Series loss_series(const std::vector<MetricsRecord>& recs) {
    Series s;
    for (const auto& r : recs)
        if (r.loss) s.emplace_back(static_cast<double>(r.step), *r.loss);
    return s;
}

Series acc_series(const std::vector<MetricsRecord>& recs, int64_t position) {
    Series s;
    for (const auto& r : recs) {
        if (static_cast<int64_t>(r.acc.size()) >= position)
            s.emplace_back(static_cast<double>(r.step), r.acc[position - 1]);
    }
    return s;
}

Range finite_range(const std::vector<const Series*>& all, bool use_x) {
    Range r{INFINITY, -INFINITY};
    for (const Series* s : all) {
        for (const auto& [x, y] : *s) {
            const double v = use_x ? x : y;
            if (!std::isfinite(v) || (!use_x && !std::isfinite(x))) continue;
            r.lo = std::min(r.lo, v);
            r.hi = std::max(r.hi, v);
        }
    }
    if (r.lo > r.hi) r = {0, 1};
    r.widen_if_flat();
    return r;
}

void loss_panel(std::string& out, const TrainingCurves& c, Range xr, double top) {
    const Series train = loss_series(c.train), eval = loss_series(c.eval);
    Range yr = finite_range({&train, &eval}, false);
    const double pad = 0.05 * (yr.hi - yr.lo);
    yr.lo = yr.lo >= 0 ? std::max(0.0, yr.lo - pad) : yr.lo - pad;  // losses are >= 0
    yr.hi += pad;
    const Panel p(top, xr, yr);
    p.axes(out, "loss", "loss");
    p.line(out, train, kColours[0], "train-loss");
    p.legend(out, 0, kColours[0], false, "train loss");
    if (!eval.empty()) {
        p.dots(out, eval, kEvalColour, "eval-loss");
        p.legend(out, 1, kEvalColour, true, "eval loss");
    }
}

void acc_panel(std::string& out, const TrainingCurves& c, Range xr, double top) {
    int64_t n = 0;
    for (const auto* recs : {&c.train, &c.eval})
        for (const auto& r : *recs) n = std::max<int64_t>(n, static_cast<int64_t>(r.acc.size()));
    const Panel p(top, xr, Range{0.0, 1.0});
    p.axes(out, "draft accuracy by block position", "accuracy");
    if (n == 0) {
        out += fmt::format(
            "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"legend\">no \"acc\" in the "
            "metrics</text>\n",
            kLeft + 20, top + kPanelH / 2);
        return;
    }
    int i = 0;
    for (int64_t k : plotted_positions(n)) {
        const char* colour = kColours[i % kColours.size()];
        p.line(out, acc_series(c.train, k), colour, fmt::format("train-acc-{}", k));
        p.dots(out, acc_series(c.eval, k), colour, fmt::format("eval-acc-{}", k));
        p.legend(out, i++, colour, false, fmt::format("position {}", k));
    }
    if (!c.eval.empty()) p.legend(out, i, "#888", true, "eval (points)");
}

}  // namespace

TrainingCurves parse_metrics_jsonl(std::string_view text, std::string_view source) {
    TrainingCurves c;
    int64_t lineno = 0;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        ++lineno;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
        MetricsRecord r = parse_record(line, fmt::format("{}:{}", source, lineno));
        (r.eval ? c.eval : c.train).push_back(std::move(r));
    }
    DF_CHECK(!c.train.empty() || !c.eval.empty(),
             "{} holds no metrics records (is the run still starting, or is it the wrong "
             "directory?)",
             source);
    return c;
}

TrainingCurves read_metrics_jsonl(const std::filesystem::path& path) {
    DF_CHECK(std::filesystem::is_regular_file(path),
             "no metrics file '{}': expected the run directory of `dflash train` (it writes "
             "metrics.jsonl)",
             path.string());
    std::ifstream in(path, std::ios::binary);
    DF_CHECK(in.good(), "cannot open '{}' for reading", path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    return parse_metrics_jsonl(ss.str(), path.string());
}

std::vector<int64_t> plotted_positions(int64_t n) {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < 4 && n > 0; ++i) {
        const int64_t k = 1 + (i * (n - 1) + 1) / 3;  // 1, ~n/3, ~2n/3, n
        if (out.empty() || out.back() != k) out.push_back(std::min(k, n));
    }
    return out;
}

std::string render_training_svg(const TrainingCurves& c, std::string_view title) {
    Series steps;
    for (const auto* recs : {&c.train, &c.eval})
        for (const auto& r : *recs) steps.emplace_back(static_cast<double>(r.step), 0.0);
    const Range xr = finite_range({&steps}, true);
    const double height = kTop + 2 * kPanelH + kGap + 50;
    std::string out = fmt::format(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
        "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\">\n"
        "<style>.tick{{font-size:11px;fill:#333}} .axis-label{{font-size:13px}} "
        ".legend{{font-size:12px}} .panel-title{{font-size:13px;font-weight:bold}} "
        ".grid{{stroke:#ddd;stroke-width:0.5}}</style>\n"
        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        "<title>{2}</title>\n"
        "<text x=\"{3:.1f}\" y=\"24\" font-size=\"16\" text-anchor=\"middle\">{2}</text>\n",
        kWidth, height, xml_escape(title), kWidth / 2);
    loss_panel(out, c, xr, kTop);
    acc_panel(out, c, xr, kTop + kPanelH + kGap);
    out += "</svg>\n";
    return out;
}

std::filesystem::path plot_run(const std::filesystem::path& run_dir,
                               const std::filesystem::path& output) {
    DF_CHECK(std::filesystem::is_directory(run_dir),
             "'{}' is not a directory; expected a run "
             "directory holding metrics.jsonl",
             run_dir.string());
    const std::filesystem::path out = output.empty() ? run_dir / "curves.svg" : output;
    check_output_file(out, "--output");
    const TrainingCurves c = read_metrics_jsonl(run_dir / "metrics.jsonl");
    std::string name = std::filesystem::weakly_canonical(run_dir).filename().string();
    const int64_t n = static_cast<int64_t>(c.train.size() + c.eval.size());
    write_text_atomic(out, render_training_svg(c, fmt::format("dflash training: {} ({} records, "
                                                              "{} eval)",
                                                              name, n, c.eval.size())));
    return out;
}

}  // namespace dflash
