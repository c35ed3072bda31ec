//! The stack of open elements, as far as the tag tracker needs it: which
//! tokenizer state a start tag's text is in, whether `<![CDATA[` opens a
//! CDATA section, and which elements are open (WHATWG HTML §13.2.6).
//!
//! Not a tree builder: it builds no tree and follows the insertion modes
//! only where they decide those questions.
//!
//! - *Foreign content* (§13.2.6.5): `svg` and `math` open elements in
//!   their namespaces; inside them a start tag makes a foreign element
//!   (no raw text: `<svg><style>` is parsed as markup), except at an HTML
//!   integration point (SVG `foreignObject`, `desc`, `title`; MathML
//!   `annotation-xml` with an HTML `encoding`) and a MathML text
//!   integration point (`mi`, `mo`, `mn`, `ms`, `mtext`), where start tags
//!   are HTML again; the breakout start tags (`b`, `div`, `p`, `table`, …,
//!   `font` with `color`, `face` or `size`) and the `</br>` and `</p>` end
//!   tags close the foreign elements first. An end tag closes the nearest
//!   foreign element of its name before the first HTML element, else goes
//!   by the HTML rules.
//! - *HTML end tags* (§13.2.6.4.7, "any other end tag"): an end tag closes
//!   the nearest open HTML element of its name unless a *special* element
//!   (§13.2.4.2) stands between (then it is ignored); `</template>` closes
//!   the nearest HTML `template`, whatever stands between; `</body>` and
//!   `</html>` close nothing. This closes at most what a browser closes:
//!   where HTML closes an element by scope (`</div>` across a `<pre>`),
//!   the tracker may keep it open.
//! - *Start tags* (§13.2.6.4.7): void elements open nothing, and the
//!   self-closing flag counts only in foreign content; `script` switches
//!   the tokenizer to script data, `style`, `xmp`, `iframe`, `noembed`,
//!   `noframes` and `noscript` (scripting on) to RAWTEXT, `textarea` and
//!   `title` to RCDATA, `plaintext` to PLAINTEXT. A `li`, `p`, `dt`, `dd`,
//!   `option`, `tr`, `td` or `th` first closes an element of its kind at
//!   the top, as a browser does for the usual markup.
//! - *The body* (page only): opened by `<body>` or by what the "in head"
//!   and "after head" modes hand to the body: text that is not white
//!   space, and a start tag other than the head's (`base`, `link`, `meta`,
//!   `script`, `style`, `template`, `title`, …).
//!
//! - *Table parts* (`caption`, `col`, `colgroup`, `tbody`, `thead`,
//!   `tfoot`, `tr`, `td`, `th`): ignored, as "in body" ignores them,
//!   unless a `table` is open or Weir's template is in a table mode (its
//!   first start tag was one of them, §13.2.6.4.18; there a part goes in
//!   only where that mode takes it: cells in a row template, rows and
//!   their cells in a row-group one, else the tracker gives up). Then they clear the
//!   stack back to their context first, as the table modes do (a cell and
//!   all it holds close, foster-parented elements too); a `col` opens a
//!   `colgroup`, which anything but `col`, `template` or white space
//!   closes again; a `form` right in a table opens nothing; the table end
//!   tags close by table scope whatever stands between.
//! - *Inside a `select`*: end tags other than `</select>`, `</option>`
//!   and `</optgroup>` are ignored, as "in select" ignores them.
//!
//! Where browsers differ or the tracker cannot follow, it gives up for
//! good (`uncertain`): `<frameset>`; inside an HTML `select`, the start
//! tags that the classic "in select" mode ignores and the newer select
//! parsing honours (`style`, `title`, `svg`, `math`, `plaintext`, …), and
//! an end tag for an element opened inside it; `annotation-xml` whose
//! `encoding` holds a character reference; in foreign content, an end tag
//! that matches no foreign element before the first HTML one (the
//! insertion mode decides what it closes: `</table>` in a cell closes the
//! `svg` in it); an end tag the "in body" rules ignore while an element of
//! its name is open under a foreign element; `col` or `colgroup` as the
//! first start tag of Weir's template ("in column group" ignores `<style>`
//! and `<script>` there), a table part in a template of the content's own;
//! `<table>` in a table mode (it closes the open table, or is ignored); a
//! table end tag inside a `select` in a table ("in select in table" closes
//! the select and applies it again);
//! `<![CDATA[` where the current node is HTML but a foreign element is
//! open below it (a browser that closed what the tracker keeps opens
//! CDATA there); more than [`MAX_DEPTH`] open elements. Each was found by
//! comparing the tracker with an HTML5 parser (issue 15's reviews).

use crate::name::Name;
use crate::tokenizer::Charset;

/// Most open elements tracked; past this the tracker is `uncertain`.
pub(crate) const MAX_DEPTH: usize = 256;

/// An element's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ns {
    Html,
    Svg,
    MathMl,
}

/// The tokenizer state a start tag's text is in (§13.2.6.4.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextMode {
    Data,
    Rcdata,
    Rawtext,
    Script,
    Plaintext,
}

/// One open element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct El {
    pub name: Name,
    pub ns: Ns,
    /// An HTML integration point (§13.2.6.5): start tags are HTML inside.
    html_ip: bool,
}

impl El {
    fn new(name: Name, ns: Ns, html_ip: bool) -> El {
        El { name, ns, html_ip }
    }

    /// An HTML element named one of `names`.
    pub(crate) fn html_any(&self, names: &[&[u8]]) -> bool {
        self.ns == Ns::Html && self.name.is_any(names)
    }

    /// An HTML `colgroup`: "in column group" while it is the current node.
    fn is_colgroup(&self) -> bool {
        self.html_any(&[b"colgroup"])
    }

    /// A MathML text integration point (§13.2.6.5).
    fn mathml_text_ip(&self) -> bool {
        self.ns == Ns::MathMl && self.name.is_any(&[b"mi", b"mo", b"mn", b"ms", b"mtext"])
    }

    /// Ends "has an element in scope" (§13.2.4.2).
    fn scope_boundary(&self) -> bool {
        match self.ns {
            Ns::Html => self.name.is_any(&[
                b"applet",
                b"caption",
                b"html",
                b"table",
                b"td",
                b"th",
                b"marquee",
                b"object",
                b"template",
            ]),
            _ => self.special(),
        }
    }

    /// In the special category (§13.2.4.2).
    fn special(&self) -> bool {
        match self.ns {
            Ns::Html => self.name.is_any(SPECIAL),
            Ns::MathMl => {
                self.name
                    .is_any(&[b"mi", b"mo", b"mn", b"ms", b"mtext", b"annotation-xml"])
            }
            Ns::Svg => self.name.is_any(&[b"foreignobject", b"desc", b"title"]),
        }
    }
}

/// HTML elements in the special category (§13.2.4.2).
const SPECIAL: &[&[u8]] = &[
    b"address",
    b"applet",
    b"area",
    b"article",
    b"aside",
    b"base",
    b"basefont",
    b"bgsound",
    b"blockquote",
    b"body",
    b"br",
    b"button",
    b"caption",
    b"center",
    b"col",
    b"colgroup",
    b"dd",
    b"details",
    b"dir",
    b"div",
    b"dl",
    b"dt",
    b"embed",
    b"fieldset",
    b"figcaption",
    b"figure",
    b"footer",
    b"form",
    b"frame",
    b"frameset",
    b"h1",
    b"h2",
    b"h3",
    b"h4",
    b"h5",
    b"h6",
    b"head",
    b"header",
    b"hgroup",
    b"hr",
    b"html",
    b"iframe",
    b"img",
    b"input",
    b"keygen",
    b"li",
    b"link",
    b"listing",
    b"main",
    b"marquee",
    b"menu",
    b"meta",
    b"nav",
    b"noembed",
    b"noframes",
    b"noscript",
    b"object",
    b"ol",
    b"p",
    b"param",
    b"plaintext",
    b"pre",
    b"script",
    b"search",
    b"section",
    b"select",
    b"source",
    b"style",
    b"summary",
    b"table",
    b"tbody",
    b"td",
    b"template",
    b"textarea",
    b"tfoot",
    b"th",
    b"thead",
    b"title",
    b"tr",
    b"track",
    b"ul",
    b"wbr",
    b"xmp",
];

/// Start tags that open nothing in HTML: the void elements (§13.1.2) and
/// those "in body" inserts and pops at once (`image` is read as `img`).
const VOID: &[&[u8]] = &[
    b"area",
    b"base",
    b"basefont",
    b"bgsound",
    b"br",
    b"col",
    b"embed",
    b"frame",
    b"hr",
    b"image",
    b"img",
    b"input",
    b"keygen",
    b"link",
    b"meta",
    b"param",
    b"source",
    b"track",
    b"wbr",
];

/// Start tags that close the foreign elements before them (§13.2.6.5);
/// `font` does only with a `color`, `face` or `size` attribute.
const BREAKOUT: &[&[u8]] = &[
    b"b",
    b"big",
    b"blockquote",
    b"body",
    b"br",
    b"center",
    b"code",
    b"dd",
    b"div",
    b"dl",
    b"dt",
    b"em",
    b"embed",
    b"h1",
    b"h2",
    b"h3",
    b"h4",
    b"h5",
    b"h6",
    b"head",
    b"hr",
    b"i",
    b"img",
    b"li",
    b"listing",
    b"menu",
    b"meta",
    b"nobr",
    b"ol",
    b"p",
    b"pre",
    b"ruby",
    b"s",
    b"small",
    b"span",
    b"strong",
    b"strike",
    b"sub",
    b"sup",
    b"table",
    b"tt",
    b"u",
    b"ul",
    b"var",
];

/// Start tags the "in head" and "after head" modes keep out of the body.
const HEAD_CONTENT: &[&[u8]] = &[
    b"html",
    b"head",
    b"body",
    b"base",
    b"basefont",
    b"bgsound",
    b"link",
    b"meta",
    b"noframes",
    b"noscript",
    b"script",
    b"style",
    b"template",
    b"title",
    b"frameset",
];

/// Start tags that the classic "in select" mode ignores and the newer
/// select parsing inserts, among those that change the tokenizer state or
/// the namespace: inside a `select`, browsers disagree on what follows.
const SELECT_SPLIT: &[&[u8]] = &[
    b"style",
    b"xmp",
    b"iframe",
    b"noembed",
    b"noframes",
    b"noscript",
    b"plaintext",
    b"title",
    b"svg",
    b"math",
    b"frameset",
    // The classic rules close the select on these; the newer select
    // parsing keeps it open for some.
    b"input",
    b"keygen",
    b"textarea",
    b"select",
    b"table",
];

/// End tags closed by scope in "in body" (§13.2.6.4.7), besides `p`,
/// `li` and the headings.
const BLOCK_END: &[&[u8]] = &[
    b"address",
    b"article",
    b"aside",
    b"blockquote",
    b"button",
    b"center",
    b"details",
    b"dialog",
    b"dir",
    b"div",
    b"dl",
    b"fieldset",
    b"figcaption",
    b"figure",
    b"footer",
    b"header",
    b"hgroup",
    b"listing",
    b"main",
    b"menu",
    b"nav",
    b"ol",
    b"pre",
    b"search",
    b"section",
    b"summary",
    b"ul",
    b"applet",
    b"marquee",
    b"object",
    b"dd",
    b"dt",
    b"select",
];

const HEADINGS: &[&[u8]] = &[b"h1", b"h2", b"h3", b"h4", b"h5", b"h6"];

/// The formatting elements (§13.2.4.3).
const FORMATTING: &[&[u8]] = &[
    b"a", b"b", b"big", b"code", b"em", b"font", b"i", b"nobr", b"s", b"small", b"strike",
    b"strong", b"tt", b"u",
];

/// Start tags that first close a `p` in button scope (§13.2.6.4.7).
const CLOSES_P: &[&[u8]] = &[
    b"address",
    b"article",
    b"aside",
    b"blockquote",
    b"center",
    b"details",
    b"dialog",
    b"dir",
    b"div",
    b"dl",
    b"fieldset",
    b"figcaption",
    b"figure",
    b"footer",
    b"header",
    b"hgroup",
    b"main",
    b"menu",
    b"nav",
    b"ol",
    b"p",
    b"search",
    b"section",
    b"summary",
    b"ul",
    b"h1",
    b"h2",
    b"h3",
    b"h4",
    b"h5",
    b"h6",
    b"pre",
    b"listing",
    b"form",
    b"plaintext",
    b"xmp",
    b"hr",
];

/// The table parts: "in body" ignores these start tags (§13.2.6.4.7);
/// a table or a template's top level gives them meaning.
const TABLE_PARTS: &[&[u8]] = &[
    b"caption",
    b"col",
    b"colgroup",
    b"tbody",
    b"thead",
    b"tfoot",
    b"tr",
    b"td",
    b"th",
];

/// Start tags "in template" takes by the "in head" rules, leaving its
/// mode as it is (§13.2.6.4.18).
const TEMPLATE_HEAD: &[&[u8]] = &[
    b"base",
    b"basefont",
    b"bgsound",
    b"link",
    b"meta",
    b"noframes",
    b"script",
    b"style",
    b"template",
    b"title",
];

/// Elements whose text is table text (§13.2.6.4.9): the "in table",
/// "in table body" and "in row" modes.
pub(crate) const TABLE_TEXT_PARENTS: &[&[u8]] = &[b"table", b"tbody", b"thead", b"tfoot", b"tr"];

/// End tags the table modes close by table scope (§13.2.4.2), whatever
/// stands between.
const TABLE_END: &[&[u8]] = &[
    b"table", b"tbody", b"thead", b"tfoot", b"tr", b"td", b"th", b"caption",
];

/// Start tags that close an open element of the same kind at the top.
const CLOSES_SIBLING: &[&[u8]] = &[b"li", b"p", b"dt", b"dd", b"option", b"tr", b"td", b"th"];

/// A complete start tag, as the tokenizer saw it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StartTag {
    pub name: Name,
    pub self_closing: bool,
    /// A `color`, `face` or `size` attribute (a breakout `font`).
    pub font_attrs: bool,
    /// `encoding` (on `annotation-xml`): `Some(true)` when it names HTML
    /// (`text/html`, `application/xhtml+xml`), `None` when it holds a
    /// character reference (not decoded here).
    pub html_encoding: Option<bool>,
    /// What it declares of the page's encoding (a `meta`).
    pub charset: Charset,
}

/// What a start tag does to the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StartPlan {
    /// Keep this many elements first (breakout, an implied close).
    pub keep: usize,
    pub push: Option<El>,
    pub mode: TextMode,
    /// The tag opens the body (page only).
    pub body: bool,
    /// The tracker cannot tell what a browser does from here on.
    pub uncertain: bool,
    /// A `meta` declares an encoding whose bytes the tracker cannot read.
    pub unreadable: bool,
    /// An `html` start tag: no mode changes ("after body" stays).
    pub inert: bool,
    /// The first start tag at the top level of Weir's template sets its
    /// insertion mode (§13.2.6.4.18).
    pub root_mode: Option<RootMode>,
}

/// The insertion mode Weir's template takes from its content's first
/// start tag (§13.2.6.4.18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RootMode {
    /// "In body".
    Body,
    /// A table mode, set by this table part.
    Table(Name),
}

/// What an end tag does to the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EndPlan {
    /// Keep this many elements (`None`: the tag closes nothing).
    pub keep: Option<usize>,
    /// A `</template>` with no HTML `template` open: inside a template of
    /// the page's, it would close that one.
    pub stray_template: bool,
    /// The tracker cannot tell what a browser closes (see [`Tree::plan_end`]).
    pub uncertain: bool,
    /// A page's `</body>` or `</html>` ("after body", §13.2.6.4.19).
    pub after_body: bool,
}

/// The open elements and what they imply.
#[derive(Debug, Clone)]
pub(crate) struct Tree {
    stack: Vec<El>,
    /// Whether this follows a whole page (else the inside of an element:
    /// a fragment or a template's content), so that it tracks the body.
    page: bool,
    /// Whether the stack starts inside a `template` (Weir's, around async
    /// content): at its top level, the table parts switch its insertion
    /// mode (§13.2.6.4.18) instead of being ignored.
    template: bool,
    body: bool,
    uncertain: bool,
    unreadable: bool,
    stray_template_end: bool,
    /// The browser is, until the next tag or text, in a mode where markup
    /// of Weir's would move what follows: "after body", after `</body>` or
    /// `</html>` (a comment would move into the body).
    unsettled: bool,
    /// For Weir's template: the mode its first top-level start tag set
    /// (`None`: none came yet).
    root_mode: Option<RootMode>,
}

impl Tree {
    /// `page`: the stack starts at the document; else inside an HTML
    /// element (a fragment's slot, a `template`'s content).
    pub(crate) fn new(page: bool) -> Tree {
        Tree {
            stack: Vec::new(),
            page,
            template: false,
            body: false,
            uncertain: false,
            unreadable: false,
            stray_template_end: false,
            unsettled: false,
            root_mode: None,
        }
    }

    /// The inside of a `template` element (async content in Weir's own).
    pub(crate) fn template_content() -> Tree {
        Tree {
            template: true,
            ..Tree::new(false)
        }
    }

    pub(crate) fn stack(&self) -> &[El] {
        &self.stack
    }

    /// The body is open (page only: explicit or implied).
    pub(crate) fn body(&self) -> bool {
        self.body
    }

    pub(crate) fn uncertain(&self) -> bool {
        self.uncertain
    }

    /// A `meta` declared an encoding whose bytes the tracker cannot read
    /// as the browser will (`crate::charset`).
    pub(crate) fn unreadable(&self) -> bool {
        self.unreadable
    }

    pub(crate) fn stray_template_end(&self) -> bool {
        self.stray_template_end
    }

    /// The current node is a foreign element: `<![CDATA[` opens a CDATA
    /// section (§13.2.5.42).
    pub(crate) fn foreign_current(&self) -> bool {
        self.stack.last().is_some_and(|e| e.ns != Ns::Html)
    }

    /// Whether text that is not white space would open the body: a page
    /// before its body, with no template open.
    pub(crate) fn text_opens_body(&self) -> bool {
        self.page && !self.body && self.stack.is_empty()
    }

    /// See the field: Weir's markup may not go here for now.
    pub(crate) fn unsettled(&self) -> bool {
        self.unsettled
    }

    /// Whether text that is not white space would change what the tree
    /// knows ([`Tree::text`]).
    pub(crate) fn wants_text(&self) -> bool {
        self.unsettled || self.text_opens_body() || self.stack.last().is_some_and(El::is_colgroup)
    }

    /// Text that is not white space came in the data state.
    pub(crate) fn text(&mut self) {
        if self.text_opens_body() {
            self.body = true;
        }
        self.unsettled = false;
        if self.stack.last().is_some_and(El::is_colgroup) {
            // It closes the colgroup (§13.2.6.4.12).
            self.stack.pop();
        }
    }

    /// Whether a foreign element is open anywhere: a browser whose tree
    /// differs from the tracker's may have one as its current node.
    pub(crate) fn foreign_open(&self) -> bool {
        self.stack.iter().any(|e| e.ns != Ns::Html)
    }

    /// The tracker cannot tell what a browser does from here on.
    pub(crate) fn give_up(&mut self) {
        self.uncertain = true;
    }

    /// Whether a start tag named `name` goes by the HTML rules here (the
    /// tree construction dispatcher, §13.2.6), not those of foreign
    /// content.
    fn html_rules(&self, name: &Name) -> bool {
        let Some(cur) = self.stack.last() else {
            return true;
        };
        cur.ns == Ns::Html
            || cur.html_ip
            || (cur.mathml_text_ip() && !name.is_any(&[b"mglyph", b"malignmark"]))
            || (cur.ns == Ns::MathMl && cur.name.is(b"annotation-xml") && name.is(b"svg"))
    }

    /// How many elements stay once foreign elements are closed up to an
    /// HTML element or an integration point.
    fn breakout_keep(&self) -> usize {
        self.stack
            .iter()
            .rposition(|e| e.ns == Ns::Html || e.html_ip || e.mathml_text_ip())
            .map_or(0, |k| k + 1)
    }

    /// What the start tag `t` does.
    pub(crate) fn plan_start(&self, t: &StartTag) -> StartPlan {
        let name = &t.name;
        let mut plan = StartPlan {
            keep: self.stack.len(),
            push: None,
            mode: TextMode::Data,
            body: false,
            uncertain: false,
            unreadable: false,
            inert: name.is(b"html"),
            root_mode: None,
        };
        if !self.html_rules(name) {
            let breakout = name.is_any(BREAKOUT) || (name.is(b"font") && t.font_attrs);
            if !breakout {
                // A foreign element of the current node's namespace.
                let ns = self.stack.last().map_or(Ns::Html, |e| e.ns);
                let html_ip = match ns {
                    Ns::Svg => name.is_any(&[b"foreignobject", b"desc", b"title"]),
                    Ns::MathMl if name.is(b"annotation-xml") => match t.html_encoding {
                        Some(html) => html,
                        None => {
                            plan.uncertain = true;
                            false
                        }
                    },
                    _ => false,
                };
                if !t.self_closing {
                    plan.push = Some(El::new(*name, ns, html_ip));
                }
                return self.checked(plan);
            }
            plan.keep = self.breakout_keep();
        }
        if self.stack[..plan.keep].last().is_some_and(El::is_colgroup)
            && !name.is_any(&[b"col", b"template"])
        {
            // "In column group", anything else closes the colgroup first
            // (§13.2.6.4.12).
            plan.keep -= 1;
        }
        let stack = &self.stack[..plan.keep];
        if self.template
            && self.root_mode.is_none()
            && stack.is_empty()
            && !name.is_any(TEMPLATE_HEAD)
        {
            plan.root_mode = Some(if name.is_any(TABLE_PARTS) {
                RootMode::Table(*name)
            } else {
                RootMode::Body
            });
        }
        plan.unreadable = name.is(b"meta") && t.charset == Charset::Unreadable;
        if self.page && name.is_any(HEAD_CONTENT) {
            if name.is(b"body") && stack.is_empty() {
                plan.body = !self.body;
            }
            if name.is(b"frameset") {
                plan.uncertain = true;
            }
        } else if self.page && !self.body && stack.is_empty() {
            plan.body = true;
        }
        // html, head and body open nothing the tracker needs: inside a
        // page's body or a template they are ignored, before it they are
        // what `body` says.
        if name.is_any(&[b"html", b"head", b"body"]) {
            return self.checked(plan);
        }
        let in_select = stack
            .iter()
            .rposition(|e| e.html_any(&[b"select"]))
            .is_some_and(|s| !stack[s..].iter().any(|e| e.name.is(b"template")));
        if in_select && name.is_any(SELECT_SPLIT) {
            plan.uncertain = true;
        }
        if name.is(b"frameset") {
            plan.uncertain = true;
            return self.checked(plan);
        }
        if name.is(b"svg") || name.is(b"math") {
            let ns = if name.is(b"svg") { Ns::Svg } else { Ns::MathMl };
            if !t.self_closing {
                plan.push = Some(El::new(*name, ns, false));
            }
            return self.checked(plan);
        }
        if name.is(b"table") {
            // In a table mode (no cell or caption between), `<table>`
            // closes the open table first (§13.2.6.4.9), or is ignored at
            // the top of a template in a table mode: not followed.
            let near = stack.iter().rev().find(|e| {
                e.ns == Ns::Html
                    && e.name
                        .is_any(&[b"td", b"th", b"caption", b"table", b"template"])
            });
            let table_mode = match near {
                Some(e) => e.name.is(b"table"),
                None => self.template && matches!(self.root_mode, Some(RootMode::Table(_))),
            };
            if table_mode {
                plan.uncertain = true;
                return self.checked(plan);
            }
        }
        if name.is_any(TABLE_PARTS) {
            let from = stack
                .iter()
                .rposition(|e| e.html_any(&[b"template"]))
                .map_or(0, |t| t + 1);
            let table = stack[from..]
                .iter()
                .rposition(|e| e.html_any(&[b"table"]))
                .map(|t| t + from + 1);
            // Clearing the stack back to a table context keeps this many
            // elements: up to the table, or none at the top level of Weir's
            // template when that is in a table mode.
            let context = match table {
                Some(keep) => Some(keep),
                None if self.template && from == 0 => {
                    // The first start tag at the top level sets the mode;
                    // a part then goes in only where that mode takes it.
                    let first = match self.root_mode {
                        Some(RootMode::Body) => return self.checked(plan),
                        Some(RootMode::Table(first)) => first,
                        None => *name,
                    };
                    let open = |n: &[&[u8]]| stack.iter().any(|e| e.html_any(n));
                    let fits = if first.is_any(&[b"td", b"th"]) {
                        // "In row": cells only.
                        name.is_any(&[b"td", b"th"])
                    } else if first.is(b"tr") {
                        // "In table body": rows, and cells in a row.
                        name.is(b"tr") || (name.is_any(&[b"td", b"th"]) && open(&[b"tr"]))
                    } else if first.is_any(&[b"tbody", b"thead", b"tfoot", b"caption"]) {
                        // "In table": sections, and rows in a section.
                        name.is_any(&[b"tbody", b"thead", b"tfoot", b"caption"])
                            || (name.is(b"tr") && open(&[b"tbody", b"thead", b"tfoot"]))
                            || (name.is_any(&[b"td", b"th"]) && open(&[b"tr"]))
                    } else {
                        // `col`, `colgroup`: "in column group" ignores
                        // `<style>`, `<script>`, … (§13.2.6.4.12) where
                        // nothing closes the mode.
                        false
                    };
                    if !fits {
                        // The browser ignores it or inserts what it
                        // implies: the tracker does not follow that.
                        plan.uncertain = true;
                        return self.checked(plan);
                    }
                    Some(0)
                }
                None if from > 0 => {
                    // In a template of the content's own, whose mode the
                    // tracker does not follow.
                    plan.uncertain = true;
                    return self.checked(plan);
                }
                // "In body" ignores them (§13.2.6.4.7): pushing one would
                // let its end tag close a `svg` the browser keeps.
                None => return self.checked(plan),
            };
            if let Some(keep) = context {
                if in_select {
                    // "In select in table" closes the select; the newer
                    // select parsing may not.
                    plan.uncertain = true;
                    return self.checked(plan);
                }
                // The table modes first clear the stack back to the part's
                // context (§13.2.6.4.9–15): a cell and what it holds,
                // elements foster-parented out of the table.
                let ctx: &[&[u8]] = if name.is_any(&[b"td", b"th"]) {
                    &[b"tr"]
                } else if name.is(b"tr") {
                    &[b"tbody", b"thead", b"tfoot"]
                } else {
                    &[]
                };
                let at = stack[keep..]
                    .iter()
                    .rposition(|e| e.html_any(ctx))
                    .map_or(keep, |k| keep + k + 1);
                plan.keep = at;
                if name.is(b"col") {
                    if stack.last().is_some_and(El::is_colgroup) {
                        plan.keep = stack.len();
                        return self.checked(plan);
                    }
                    // A `col` in a table opens a `colgroup` of its own.
                    plan.push = Some(El::new(Name::of(b"colgroup"), Ns::Html, false));
                    return self.checked(plan);
                }
                plan.push = Some(El::new(*name, Ns::Html, false));
                return self.checked(plan);
            }
        }
        if name.is(b"form") && stack.last().is_some_and(|e| e.html_any(TABLE_TEXT_PARENTS)) {
            // "In table" inserts a form and pops it at once (§13.2.6.4.9).
            return self.checked(plan);
        }
        if !in_select && name.is_any(CLOSES_P) {
            // "Close a p element" when one is in button scope.
            for (k, e) in stack.iter().enumerate().rev() {
                if e.html_any(&[b"p"]) {
                    plan.keep = k;
                    break;
                }
                if e.scope_boundary() || (e.html_any(&[b"button"])) {
                    break;
                }
            }
        } else if name.is_any(CLOSES_SIBLING)
            && stack
                .last()
                .is_some_and(|top| top.ns == Ns::Html && top.name.same(name))
        {
            plan.keep -= 1;
        }
        if name.is_any(VOID) {
            return self.checked(plan);
        }
        plan.mode = if name.is(b"script") {
            TextMode::Script
        } else if name.is_any(&[
            b"style",
            b"xmp",
            b"iframe",
            b"noembed",
            b"noframes",
            b"noscript",
        ]) {
            TextMode::Rawtext
        } else if name.is_any(&[b"textarea", b"title"]) {
            TextMode::Rcdata
        } else if name.is(b"plaintext") {
            TextMode::Plaintext
        } else {
            TextMode::Data
        };
        plan.push = Some(El::new(*name, Ns::Html, false));
        self.checked(plan)
    }

    /// `plan`, uncertain if it would go past [`MAX_DEPTH`].
    fn checked(&self, mut plan: StartPlan) -> StartPlan {
        if plan.push.is_some() && plan.keep >= MAX_DEPTH {
            plan.uncertain = true;
            plan.push = None;
        }
        plan
    }

    pub(crate) fn apply_start(&mut self, plan: &StartPlan) {
        self.stack.truncate(plan.keep);
        if let Some(el) = plan.push {
            self.stack.push(el);
        }
        self.body |= plan.body;
        self.uncertain |= plan.uncertain;
        self.unreadable |= plan.unreadable;
        self.unsettled &= plan.inert;
        if plan.root_mode.is_some() {
            self.root_mode = plan.root_mode;
        }
    }

    /// What the end tag `name` does.
    pub(crate) fn plan_end(&self, name: &Name) -> EndPlan {
        let mut top = self.stack.len();
        if self.stack.last().is_some_and(El::is_colgroup)
            && !name.is_any(&[b"colgroup", b"template"])
        {
            // "In column group", anything else closes the colgroup first.
            top -= 1;
        }
        if self.foreign_current() {
            if name.is_any(&[b"br", b"p"]) {
                // A breakout: the foreign elements close first.
                top = self.breakout_keep();
            } else {
                // The nearest foreign element of that name before the
                // first HTML element; else the HTML rules, over the whole
                // stack.
                for (k, e) in self.stack.iter().enumerate().rev() {
                    if e.ns == Ns::Html {
                        break;
                    }
                    if e.name.same(name) {
                        return EndPlan {
                            keep: Some(k),
                            stray_template: false,
                            uncertain: false,
                            after_body: false,
                        };
                    }
                }
                // Else the rules of the current insertion mode, which the
                // tracker follows only for "in body": in a cell `</table>`
                // closes the cell and the `svg` in it (§13.2.6.4.15); in a
                // template `</form>` pops up to the form. Only the end
                // tags every mode handles alike are followed.
                if !name.is_any(&[b"template", b"body", b"html"]) {
                    return EndPlan {
                        keep: None,
                        stray_template: false,
                        uncertain: true,
                        after_body: false,
                    };
                }
            }
        }
        let mut plan = self.plan_html_end(name, top);
        // The tracker closes nothing, yet an element of that name is open
        // under a foreign element: a table mode or a template may close it
        // and the foreign element with it, where "in body" does not.
        if !plan.stray_template && plan.keep.is_none_or(|k| k >= top) {
            let stack = &self.stack[..top];
            if let Some(f) = stack.iter().rposition(|e| e.ns != Ns::Html) {
                let heading = name.is_any(HEADINGS);
                plan.uncertain = stack[..f].iter().any(|e| {
                    e.ns == Ns::Html && (e.name.same(name) || (heading && e.name.is_any(HEADINGS)))
                });
            }
        }
        plan
    }

    /// An end tag by the HTML rules ("in body", §13.2.6.4.7), over the
    /// first `top` elements.
    fn plan_html_end(&self, name: &Name, top: usize) -> EndPlan {
        let stack = &self.stack[..top];
        let closes = |keep: usize| EndPlan {
            keep: Some(keep),
            stray_template: false,
            uncertain: false,
            after_body: false,
        };
        let nothing = EndPlan {
            keep: (top < self.stack.len()).then_some(top),
            stray_template: false,
            uncertain: false,
            after_body: false,
        };
        if name.is(b"template") {
            return match stack.iter().rposition(|e| e.html_any(&[b"template"])) {
                Some(k) => closes(k),
                None => EndPlan {
                    stray_template: true,
                    ..nothing
                },
            };
        }
        // Inside a `select`, "in select" ignores every end tag but its own
        // and `option`'s and `optgroup`'s (§13.2.6.4.16); the newer select
        // parsing may close an element opened inside it: then the tracker
        // cannot tell.
        if let Some(s) = stack.iter().rposition(|e| e.html_any(&[b"select"]))
            && !stack[s..].iter().any(|e| e.html_any(&[b"template"]))
            && !name.is_any(&[b"select", b"option", b"optgroup"])
        {
            // "In select in table" closes the select on a table end tag
            // and applies it again: not followed.
            let in_table = name.is_any(TABLE_END)
                && (stack[..s].iter().any(|e| e.html_any(&[b"table"]))
                    || (self.template && matches!(self.root_mode, Some(RootMode::Table(_)))));
            return EndPlan {
                uncertain: in_table || stack[s + 1..].iter().any(|e| e.name.same(name)),
                ..nothing
            };
        }
        if name.is_any(TABLE_END) {
            // Table scope: a cell's content and elements foster-parented
            // out of the table close with it.
            for (k, e) in stack.iter().enumerate().rev() {
                if e.ns == Ns::Html && e.name.same(name) {
                    return closes(k);
                }
                if e.html_any(&[b"html", b"table", b"template"]) {
                    // A row or cell right in a table stands in the `tbody`
                    // the browser implied for it (§13.2.6.4.9), which
                    // `</tbody>` closes.
                    let implied = e.name.is(b"table")
                        && name.is(b"tbody")
                        && stack
                            .get(k + 1)
                            .is_some_and(|c| c.html_any(&[b"tr", b"td", b"th"]));
                    if implied {
                        return closes(k + 1);
                    }
                    break;
                }
            }
            return nothing;
        }
        if name.is_any(&[b"body", b"html"]) {
            return EndPlan {
                after_body: self.page,
                ..nothing
            };
        }
        if name.is_any(&[b"br", b"form"]) {
            // `</form>` takes the form out of the stack but leaves what
            // is inside it open: kept open here.
            return nothing;
        }
        // The elements closed "by scope": the nearest of that name (any
        // heading for a heading) unless a scope boundary comes first
        // (§13.2.4.2); then everything after it closes.
        let scope: Option<&[&[u8]]> = if name.is(b"p") {
            Some(&[b"button"])
        } else if name.is(b"li") {
            Some(&[b"ol", b"ul"])
        } else if name.is_any(HEADINGS) || name.is_any(BLOCK_END) {
            Some(&[])
        } else {
            None
        };
        if let Some(extra) = scope {
            let heading = name.is_any(HEADINGS);
            let target = |e: &El| {
                e.ns == Ns::Html
                    && if heading {
                        e.name.is_any(HEADINGS)
                    } else {
                        e.name.same(name)
                    }
            };
            for (k, e) in stack.iter().enumerate().rev() {
                if target(e) {
                    return closes(k);
                }
                if e.scope_boundary() || (e.html_any(extra)) {
                    break;
                }
            }
            return nothing;
        }
        if name.is_any(FORMATTING) {
            // The adoption agency (§13.2.6.4.7): closed when nothing
            // special came after it; otherwise the tree is rearranged and
            // the tracker keeps it open.
            for (k, e) in stack.iter().enumerate().rev() {
                if e.ns == Ns::Html && e.name.same(name) {
                    return if stack[k + 1..].iter().any(El::special) {
                        nothing
                    } else {
                        closes(k)
                    };
                }
                if e.scope_boundary() {
                    break;
                }
            }
            return nothing;
        }
        // Any other end tag: the nearest of that name, unless a special
        // element comes first.
        for (k, e) in stack.iter().enumerate().rev() {
            if e.ns == Ns::Html && e.name.same(name) {
                return closes(k);
            }
            if e.special() {
                break;
            }
        }
        nothing
    }

    pub(crate) fn apply_end(&mut self, plan: &EndPlan) {
        if let Some(keep) = plan.keep {
            self.stack.truncate(keep);
        }
        self.stray_template_end |= plan.stray_template;
        self.uncertain |= plan.uncertain;
        self.unsettled = plan.after_body;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(tree: &mut Tree, name: &str) -> TextMode {
        let plan = tree.plan_start(&StartTag {
            name: Name::of(name.as_bytes()),
            self_closing: false,
            font_attrs: false,
            html_encoding: Some(false),
            charset: Charset::None,
        });
        tree.apply_start(&plan);
        plan.mode
    }

    fn end(tree: &mut Tree, name: &str) {
        let plan = tree.plan_end(&Name::of(name.as_bytes()));
        tree.apply_end(&plan);
    }

    fn names(tree: &Tree) -> Vec<String> {
        tree.stack()
            .iter()
            .map(|e| String::from_utf8_lossy(e.name.as_slice()).into_owned())
            .collect()
    }

    #[test]
    fn foreign_content_has_no_raw_text_until_an_integration_point() {
        let mut t = Tree::new(false);
        start(&mut t, "svg");
        assert_eq!(start(&mut t, "style"), TextMode::Data);
        end(&mut t, "style");
        start(&mut t, "foreignobject");
        assert_eq!(start(&mut t, "style"), TextMode::Rawtext);
        end(&mut t, "style");
        end(&mut t, "foreignobject");
        start(&mut t, "g");
        // A breakout tag closes the svg.
        start(&mut t, "div");
        assert_eq!(names(&t), ["div"]);
        let mut m = Tree::new(false);
        start(&mut m, "math");
        start(&mut m, "mtext");
        assert_eq!(start(&mut m, "textarea"), TextMode::Rcdata);
    }

    #[test]
    fn end_tags_stop_at_special_elements_but_template_ends_do_not() {
        let mut t = Tree::new(false);
        for n in ["span", "svg", "foreignobject", "div"] {
            start(&mut t, n);
        }
        end(&mut t, "svg");
        assert_eq!(names(&t).len(), 4, "</svg> inside HTML content is ignored");
        end(&mut t, "span");
        assert_eq!(names(&t).len(), 4, "the div is special");
        start(&mut t, "template");
        start(&mut t, "div");
        end(&mut t, "template");
        assert_eq!(names(&t), ["span", "svg", "foreignobject", "div"]);
        end(&mut t, "template");
        assert!(t.stray_template_end());
        let mut s = Tree::new(false);
        start(&mut s, "svg");
        start(&mut s, "template");
        end(&mut s, "template");
        assert_eq!(names(&s), ["svg"], "an SVG template closes by its name");
    }

    #[test]
    fn the_page_body_opens_by_tag_or_by_text() {
        let mut t = Tree::new(true);
        start(&mut t, "html");
        start(&mut t, "head");
        start(&mut t, "title");
        end(&mut t, "title");
        start(&mut t, "meta");
        assert!(!t.body());
        start(&mut t, "main");
        assert!(t.body());
        let mut u = Tree::new(true);
        assert!(u.text_opens_body());
        u.text();
        assert!(u.body());
    }

    #[test]
    fn browsers_disagree_inside_select_and_on_framesets() {
        let mut t = Tree::new(false);
        start(&mut t, "select");
        start(&mut t, "option");
        assert!(!t.uncertain());
        start(&mut t, "style");
        assert!(t.uncertain());
        let mut f = Tree::new(true);
        start(&mut f, "frameset");
        assert!(f.uncertain());
    }
}
