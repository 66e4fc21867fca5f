#include "eval/inspect/html.h"

#include <fmt/format.h>

#include "core/error.h"
#include "eval/inspect/heatmap.h"

namespace kvs::inspect {

namespace {

std::string css_color(double f) {
  const auto c = keep_color(f);
  return fmt::format("#{:02x}{:02x}{:02x}", c[0], c[1], c[2]);
}

// Text on a dark shade is white.
const char* text_color(double f) { return f > 0.62 ? "#fff" : "#111"; }

// JSON safe inside <script>: ASCII only, and no "</" that could close the element.
std::string script_json(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/') {
      out += "<\\/";
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string value_text(const nlohmann::json& v) {
  if (v.is_string()) {  // as it is, unless it holds control characters (a template's "\n"): then quoted
    const std::string& s = v.get_ref<const std::string&>();
    for (char c : s)
      if (static_cast<unsigned char>(c) < 0x20) return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return s;
  }
  if (v.is_null()) return "null";
  if (v.is_array() && !v.empty() && v.size() <= 32 && v.front().is_string()) {
    std::string s;
    for (const auto& x : v) {
      if (!s.empty()) s += ' ';
      s += x.is_string() ? x.get<std::string>() : x.dump();
    }
    return s;
  }
  if ((v.is_array() || v.is_object()) && v.size() > 16) return fmt::format("({} {})", v.size(), v.is_array() ? "values" : "entries");
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Header fields shown first (the press and what it was asked); the rest follow in file order.
const char* const kFirstFields[] = {"press", "press_options", "keep", "keep_measured", "keep_chosen", "quality", "budget",
                                    "sinks", "window", "trigger", "seed", "model_name", "context_tokens"};

std::string params_table(const nlohmann::json& h) {
  std::string rows;
  auto row = [&](const std::string& k, const nlohmann::json& v) {
    rows += fmt::format("<tr><th>{}</th><td>{}</td></tr>\n", html_escape(k), html_escape(value_text(v)));
  };
  if (!h.is_object()) return "<p>(no header)</p>";
  for (const char* k : kFirstFields)
    if (h.contains(k)) row(k, h.at(k));
  for (const auto& [k, v] : h.items()) {
    bool shown = k == "context_ids";
    for (const char* f : kFirstFields) shown = shown || k == f;
    if (!shown) row(k, v);
  }
  return "<table class=\"params\">\n" + rows + "</table>";
}

std::string grid_table(const KeptMap& m) {
  const std::vector<double> hr = m.head_keep_ratio(), lr = m.layer_keep_ratio();
  std::string s = "<table id=\"grid\"><thead><tr><th>layer</th>";
  for (int h = 0; h < m.n_head_kv; ++h) s += fmt::format("<th>h{}</th>", h);
  s += "<th>mean</th></tr></thead><tbody>\n";
  for (int l = 0; l < m.n_layer; ++l) {
    s += fmt::format("<tr class=\"layer\" data-layer=\"{}\"><th>{}</th>", l, l);
    for (int h = 0; h < m.n_head_kv; ++h) {
      const double r = hr[static_cast<size_t>(l) * m.n_head_kv + h];
      s += fmt::format("<td class=\"cell\" data-layer=\"{}\" data-head=\"{}\" style=\"background:{};color:{}\">{:.2f}</td>", l,
                       h, css_color(r), text_color(r), r);
    }
    const double r = lr[static_cast<size_t>(l)];
    s += fmt::format("<td class=\"mean\" style=\"background:{};color:{}\">{:.2f}</td></tr>\n", css_color(r), text_color(r), r);
  }
  return s + "</tbody></table>";
}

constexpr const char* kStyle = R"CSS(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px 24px;color:#111;background:#fafafa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 6px}
.sub{color:#555;margin:0 0 8px}
.top{display:flex;gap:32px;flex-wrap:wrap;align-items:flex-start}
table.params{border-collapse:collapse;font-size:12.5px}
table.params th{text-align:left;padding:1px 10px 1px 0;color:#555;font-weight:600;vertical-align:top}
table.params td{font-family:ui-monospace,Menlo,Consolas,monospace;max-width:480px;word-break:break-all}
#grid{border-collapse:collapse;font-size:11px;font-family:ui-monospace,Menlo,Consolas,monospace}
#grid th{padding:1px 5px;color:#555;font-weight:600}
#grid td{padding:2px 5px;text-align:center;cursor:pointer;border:1px solid #fff;min-width:28px}
#grid tr.layer:hover th,#grid tr.sel th{background:#222;color:#fff}
#grid td.sel{outline:2px solid #d62728;outline-offset:-2px}
.legend{display:flex;align-items:center;gap:6px;font-size:12px;color:#555}
.ramp{width:180px;height:12px;border:1px solid #ccc;background:linear-gradient(90deg,#ffffff 0%,#ffeda0 25%,#78c679 50%,#2c7fb8 75%,#081d58 100%)}
#view{font-weight:600;margin:6px 0}
#markinfo{color:#d62728;font-weight:600;margin-left:12px}
#info{font-size:12px;color:#555;min-height:1.4em;font-family:ui-monospace,Menlo,Consolas,monospace}
button{font:inherit;font-size:12px;padding:1px 8px;cursor:pointer}
#text{white-space:pre-wrap;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px;line-height:1.6;background:#fff;
  border:1px solid #ddd;padding:10px;word-break:break-word}
.tok{border-radius:2px}
.tok.sp{font-style:italic;opacity:.85}
.tok.mark{outline:2px solid #d62728;outline-offset:0}
.tok:hover{outline:1px solid #000}
.tok.flash{outline:3px solid #ff7f0e}
#overview{display:block;cursor:crosshair;border:1px solid #ddd;background:#ebebeb;max-width:100%}
)CSS";

constexpr const char* kScript = R"JS(
(function(){
const D=JSON.parse(document.getElementById('kvs-data').textContent);
const L=D.n_layer,H=D.n_head_kv,N=D.n_tokens;
const bits=D.heads.map(function(hex){const b=new Uint8Array(N);
  for(let i=0;i<hex.length;i++){const v=parseInt(hex[i],16);for(let k=0;k<4;k++){const t=i*4+k;if(t<N)b[t]=(v>>k)&1;}}return b;});
const stops=[[0,255,255,255],[.25,255,237,160],[.5,120,198,121],[.75,44,127,184],[1,8,29,88]];
function color(f){f=Math.max(0,Math.min(1,f));let i=0;while(i<3&&f>stops[i+1][0])i++;
  const a=stops[i],b=stops[i+1],t=(f-a[0])/(b[0]-a[0]);
  return 'rgb('+[1,2,3].map(function(k){return Math.round(a[k]+t*(b[k]-a[k]));}).join(',')+')';}
const toks=document.querySelectorAll('#text .tok');
function frac(sel){const f=new Float64Array(N);let heads=[];
  if(sel.layer<0){for(let i=0;i<L*H;i++)heads.push(i);}
  else if(sel.head<0){for(let h=0;h<H;h++)heads.push(sel.layer*H+h);}
  else heads=[sel.layer*H+sel.head];
  for(const j of heads){const b=bits[j];for(let t=0;t<N;t++)f[t]+=b[t];}
  for(let t=0;t<N;t++)f[t]/=heads.length||1;return f;}
let pinned={layer:-1,head:-1},cur=null,marked=[],markText='';
function describe(sel){if(sel.layer<0)return 'all '+L+' layers x '+H+' KV heads';
  if(sel.head<0)return 'layer '+sel.layer+' ('+H+' KV heads)';return 'layer '+sel.layer+', KV head '+sel.head;}
function show(sel){if(cur&&cur.layer===sel.layer&&cur.head===sel.head)return;cur=sel;const f=frac(sel);let n=0;
  for(let t=0;t<toks.length&&t<N;t++){toks[t].style.background=color(f[t]);toks[t].style.color=f[t]>.62?'#fff':'#111';n+=f[t];}
  document.getElementById('view').textContent='Shading: '+describe(sel)+' \u2014 kept '+(100*n/Math.max(N,1)).toFixed(1)+'% of the context';
  if(marked.length){let m=0;for(const t of marked)m+=f[t];
    document.getElementById('markinfo').textContent='outlined: \u201c'+markText+'\u201d ('+marked.length+' tokens), kept by '+
      (100*m/marked.length).toFixed(0)+'% of these heads';}
  document.querySelectorAll('#grid tr.layer').forEach(function(r){r.classList.toggle('sel',+r.dataset.layer===sel.layer&&sel.head<0);});
  document.querySelectorAll('#grid td.cell').forEach(function(c){c.classList.toggle('sel',+c.dataset.layer===sel.layer&&+c.dataset.head===sel.head);});}
document.querySelectorAll('#grid tr.layer').forEach(function(r){
  r.addEventListener('mouseenter',function(){show({layer:+r.dataset.layer,head:-1});});
  r.addEventListener('mouseleave',function(){show(pinned);});
  r.querySelector('th').addEventListener('click',function(){pinned={layer:+r.dataset.layer,head:-1};cur=null;show(pinned);});});
document.querySelectorAll('#grid td.cell').forEach(function(c){c.addEventListener('click',function(e){
  pinned={layer:+c.dataset.layer,head:+c.dataset.head};cur=null;show(pinned);e.stopPropagation();});});
document.querySelectorAll('#grid td.mean').forEach(function(c){c.addEventListener('click',function(){
  pinned={layer:+c.parentNode.dataset.layer,head:-1};cur=null;show(pinned);});});
document.getElementById('all').addEventListener('click',function(){pinned={layer:-1,head:-1};cur=null;show(pinned);});
document.getElementById('text').addEventListener('mouseover',function(e){const s=e.target.closest('.tok');if(!s)return;
  const t=+s.id.slice(1);const per=[];let all=0;
  for(let l=0;l<L;l++){let c=0;for(let h=0;h<H;h++)c+=bits[l*H+h][t];per.push(c);all+=c;}
  document.getElementById('info').textContent='position '+t+(D.ids.length?' \u00b7 id '+D.ids[t]:'')+' \u00b7 kept by '+all+'/'+(L*H)+
    ' heads \u00b7 per layer: '+per.join(' ');});
if(D.mark){let text='',starts=[];toks.forEach(function(s){starts.push(text.length);text+=s.textContent;});
  const at=text.indexOf(D.mark);
  if(at>=0){const end=at+D.mark.length;markText=D.mark;
    toks.forEach(function(s,t){const a=starts[t],b=a+s.textContent.length;if(b>at&&a<end){s.classList.add('mark');marked.push(t);}});}
  else document.getElementById('markinfo').textContent='\u201c'+D.mark+'\u201d is not in the context';}
const cv=document.getElementById('overview');
function drawOverview(){const W=Math.max(200,Math.min(4096,document.getElementById('text').clientWidth||1000));
  const rh=Math.max(6,Math.min(24,Math.floor(120/Math.max(L,1)))),band=marked.length?8:0;
  cv.width=W;cv.height=band+L*rh;cv.style.width=W+'px';const g=cv.getContext('2d');
  for(let l=0;l<L;l++){const f=new Float64Array(N);for(let h=0;h<H;h++){const b=bits[l*H+h];for(let t=0;t<N;t++)f[t]+=b[t];}
    for(let x=0;x<W;x++){const t0=Math.floor(x*N/W),t1=Math.max(t0+1,Math.floor((x+1)*N/W));let v=0;
      for(let t=t0;t<t1;t++)v+=f[t];g.fillStyle=color(v/((t1-t0)*H));g.fillRect(x,band+l*rh,1,rh-1);}}
  g.fillStyle='#d62728';for(const t of marked)g.fillRect(Math.floor(t*W/N),0,Math.max(1,Math.ceil(W/N)),band-2);}
cv.addEventListener('click',function(e){const r=cv.getBoundingClientRect();
  const t=Math.min(N-1,Math.max(0,Math.floor((e.clientX-r.left)/r.width*N)));if(!toks[t])return;
  toks[t].scrollIntoView({block:'center'});toks[t].classList.add('flash');setTimeout(function(){toks[t].classList.remove('flash');},1200);});
if(N>0&&L>0)drawOverview();
const hm=/layer=(\d+)(?:&head=(\d+))?/.exec(location.hash);
if(hm&&+hm[1]<L&&(hm[2]===undefined||+hm[2]<H))pinned={layer:+hm[1],head:hm[2]===undefined?-1:+hm[2]};
cur=null;show(pinned);
})();
)JS";

}  // namespace

std::string html_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::vector<std::string> kept_bitmaps_hex(const KeptMap& m) {
  static const char* digits = "0123456789abcdef";
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(m.n_layer) * m.n_head_kv);
  for (int l = 0; l < m.n_layer; ++l)
    for (int h = 0; h < m.n_head_kv; ++h) {
      std::vector<uint8_t> nib(static_cast<size_t>((m.n_tokens + 3) / 4), 0);  // [ceil(n_tokens / 4)]
      for (int32_t t = 0; t < m.n_tokens; ++t)
        if (m.at(l, h, t)) nib[static_cast<size_t>(t / 4)] |= static_cast<uint8_t>(1 << (t % 4));
      std::string s(nib.size(), '0');
      for (size_t i = 0; i < nib.size(); ++i) s[i] = digits[nib[i]];
      out.push_back(std::move(s));
    }
  return out;
}

std::string render_html(const InspectPage& p) {
  const KeptMap& m = p.kept;
  if (p.tokens.size() != static_cast<size_t>(m.n_tokens))
    fail("inspect page: {} token texts for a map of {} tokens", p.tokens.size(), m.n_tokens);
  if (!p.token_ids.empty() && p.token_ids.size() != p.tokens.size())
    fail("inspect page: {} token ids for {} tokens", p.token_ids.size(), p.tokens.size());
  const std::string press = p.header.is_object() ? p.header.value("press", std::string("?")) : std::string("?");
  const std::string model = p.header.is_object() ? p.header.value("model_name", std::string()) : std::string();

  nlohmann::json data;
  data["n_layer"] = m.n_layer;
  data["n_head_kv"] = m.n_head_kv;
  data["n_tokens"] = m.n_tokens;
  data["heads"] = kept_bitmaps_hex(m);
  data["ids"] = p.token_ids;
  data["mark"] = p.mark;

  std::string html;
  html.reserve(static_cast<size_t>(m.n_tokens) * 90 + 16384);
  html += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += fmt::format("<title>kvshrink inspect: {}</title>\n<style>{}</style></head><body>\n", html_escape(p.title), kStyle);
  html += fmt::format("<h1>What <code>{}</code> kept &mdash; {}</h1>\n", html_escape(press), html_escape(p.title));
  html += fmt::format(
      "<p class=\"sub\">{}{} context tokens &middot; {} layers &times; {} KV heads &middot; {:.1f}% of the (layer, head, token) "
      "slots kept</p>\n",
      model.empty() ? "" : "model " + html_escape(model) + " &middot; ", m.n_tokens, m.n_layer, m.n_head_kv,
      100 * m.keep_ratio());
  html += "<div class=\"top\">\n<section><h2>Press and parameters</h2>\n" + params_table(p.header) + "\n</section>\n";
  html += "<section><h2>Keep ratio per layer &times; KV head</h2>\n" + grid_table(m) +
          "\n<p class=\"legend\">hover a layer to shade the text by its heads &middot; click a layer or a cell to pin it "
          "<button id=\"all\" type=\"button\">all heads</button></p>\n</section>\n</div>\n";
  html += "<h2>Overview: tokens &times; layers</h2>\n<p class=\"legend\">each row a layer (0 on top), each column a stretch of the "
          "context shaded by the fraction of that layer's heads keeping it; red: the outlined text; click to jump there</p>\n"
          "<canvas id=\"overview\" width=\"1000\" height=\"40\"></canvas>\n";
  html += "<h2>Context</h2>\n<div class=\"legend\"><span>kept by none</span><span class=\"ramp\"></span><span>by all</span>"
          "<span id=\"markinfo\"></span></div>\n<div id=\"view\"></div><div id=\"info\"></div>\n<div id=\"text\">";
  const std::vector<double> f = m.token_fraction();  // [n_tokens]: the shading before the script runs
  for (int32_t t = 0; t < m.n_tokens; ++t) {
    const TokenPiece& tp = p.tokens[static_cast<size_t>(t)];
    const double v = f[static_cast<size_t>(t)];
    html += fmt::format("<span class=\"tok{}\" id=\"t{}\" style=\"background:{};color:{}\">{}</span>", tp.special ? " sp" : "", t,
                        css_color(v), text_color(v), html_escape(tp.text));
  }
  html += "</div>\n<script type=\"application/json\" id=\"kvs-data\">" + script_json(data) + "</script>\n";
  html += std::string("<script>") + kScript + "</script>\n</body></html>\n";
  return html;
}

}  // namespace kvs::inspect
