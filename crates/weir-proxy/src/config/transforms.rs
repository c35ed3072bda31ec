//! A route's `transforms` list and its `[route.<stage>]` settings tables,
//! checked into a [`ChainSpec`].

use std::sync::Arc;

use toml::Spanned;
use weir_transform::chain::{ChainError, ChainSpec, StageName, StageSpec, UnknownStage};

use super::error::{ConfigError, Errors};
use super::raw::RawRoute;

/// A route's `transforms` list and `[route.<stage>]` tables, as a checked chain.
pub(super) fn route_transforms(
    i: usize,
    r: &RawRoute,
    errors: &Errors<'_>,
) -> Result<ChainSpec, ConfigError> {
    let mut stages = Vec::with_capacity(r.transforms.get_ref().len());
    for (j, name) in r.transforms.get_ref().iter().enumerate() {
        let key = format!("route[{i}].transforms[{j}]");
        let stage: StageName = name
            .get_ref()
            .parse()
            .map_err(|e: UnknownStage| errors.at(name.span(), key.clone(), e.to_string()))?;
        let spec = match stage {
            StageName::Compress => StageSpec::Compress(Arc::new(
                r.compress
                    .as_ref()
                    .map(|c| c.get_ref().clone())
                    .unwrap_or_default(),
            )),
            StageName::HtmlRewrite => StageSpec::HtmlRewrite(Arc::new(
                r.html_rewrite
                    .as_ref()
                    .map(|c| c.get_ref().clone())
                    .unwrap_or_default(),
            )),
            StageName::Coalesce => StageSpec::Coalesce(
                r.coalesce
                    .as_ref()
                    .map(|c| *c.get_ref())
                    .unwrap_or_default(),
            ),
            StageName::MsgpackJson => StageSpec::MsgpackJson(
                r.msgpack_json
                    .as_ref()
                    .map(|c| c.get_ref().clone())
                    .unwrap_or_default(),
            ),
        };
        stages.push((spec, name.span(), key));
    }
    // A settings table for a stage the route does not list is a mistake
    // worth naming: the settings would silently do nothing.
    let tables = [
        (
            StageName::Compress,
            r.compress.as_ref().map(Spanned::span),
            "compress",
        ),
        (
            StageName::HtmlRewrite,
            r.html_rewrite.as_ref().map(Spanned::span),
            "html_rewrite",
        ),
        (
            StageName::Coalesce,
            r.coalesce.as_ref().map(Spanned::span),
            "coalesce",
        ),
        (
            StageName::MsgpackJson,
            r.msgpack_json.as_ref().map(Spanned::span),
            "msgpack_json",
        ),
    ];
    for (stage, span, table) in tables {
        if let Some(span) = span
            && !stages.iter().any(|(s, _, _)| s.name() == stage)
        {
            return Err(errors.at(
                span,
                format!("route[{i}].{table}"),
                format!(
                    "[route.{table}] is set but {:?} is not in this route's transforms list",
                    stage.as_str()
                ),
            ));
        }
    }
    let spans: Vec<_> = stages
        .iter()
        .map(|(_, span, key)| (span.clone(), key.clone()))
        .collect();
    ChainSpec::new(stages.into_iter().map(|(s, _, _)| s).collect()).map_err(|e| {
        // Point at the offending entry where there is one, else at the list.
        let (span, key) = match &e {
            ChainError::CoalesceBounds { .. } => (
                r.coalesce
                    .as_ref()
                    .map_or(r.transforms.span(), Spanned::span),
                format!("route[{i}].coalesce"),
            ),
            ChainError::Duplicate(name) | ChainError::AfterCompress(name) => spans
                .iter()
                .zip(r.transforms.get_ref())
                .rfind(|(_, n)| n.get_ref() == name.as_str())
                .map_or(
                    (r.transforms.span(), format!("route[{i}].transforms")),
                    |((s, k), _)| (s.clone(), k.clone()),
                ),
            _ => (r.transforms.span(), format!("route[{i}].transforms")),
        };
        errors.at(span, key, e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::Config;

    const UP: &str = "[[upstream]]\nname = \"app\"\nurl = \"http://127.0.0.1:3000\"\n\n[[route]]\nupstream = \"app\"\n";

    fn parse(route_lines: &str) -> Result<Config, String> {
        Config::parse(&format!("{UP}{route_lines}\n"), "t.toml", Path::new("."))
            .map_err(|e| e.to_string())
    }

    fn err(route_lines: &str) -> String {
        match parse(route_lines) {
            Ok(_) => panic!("accepted: {route_lines}"),
            Err(e) => e,
        }
    }

    #[test]
    fn stages_are_kept_in_body_order_with_their_settings() {
        let c = parse(
            "transforms = [\"html-rewrite\", \"compress\"]\n[route.compress]\ncodings = [\"gzip\"]\n",
        )
        .expect("valid");
        let names: Vec<_> = c.routes[0]
            .transforms
            .stages()
            .iter()
            .map(|s| s.name().as_str())
            .collect();
        assert_eq!(names, ["html-rewrite", "compress"]);
    }

    #[test]
    fn no_transforms_is_an_empty_chain() {
        let c = parse("").expect("valid");
        assert!(c.routes[0].transforms.is_empty());
    }

    #[test]
    fn unknown_transform_names_file_line_key_and_the_choices() {
        let e = err("transforms = [\"compress\", \"gzipp\"]");
        assert!(e.starts_with("t.toml:7:"), "{e}");
        assert!(e.contains("route[0].transforms[1]"), "{e}");
        assert!(e.contains("\"gzipp\""), "{e}");
        assert!(e.contains("html-rewrite"), "{e}");
    }

    #[test]
    fn settings_for_an_unlisted_stage_are_refused() {
        let e = err("transforms = [\"compress\"]\n[route.coalesce]\nmin_bytes = 1\n");
        assert!(e.contains("route[0].coalesce"), "{e}");
        assert!(e.contains("not in this route's transforms list"), "{e}");
    }

    #[test]
    fn a_content_reading_stage_after_compress_is_refused() {
        let e = err("transforms = [\"compress\", \"html-rewrite\"]");
        assert!(e.contains("route[0].transforms[1]"), "{e}");
        assert!(e.contains("must come before"), "{e}");
    }

    #[test]
    fn a_stage_listed_twice_is_refused() {
        let e = err("transforms = [\"coalesce\", \"coalesce\"]");
        assert!(e.contains("listed twice"), "{e}");
        assert!(e.contains("route[0].transforms[1]"), "{e}");
    }

    #[test]
    fn coalesce_bounds_are_checked() {
        let e =
            err("transforms = [\"coalesce\"]\n[route.coalesce]\nmin_bytes = 100\nmax_bytes = 10\n");
        assert!(e.contains("route[0].coalesce"), "{e}");
        assert!(e.contains("min_bytes"), "{e}");
    }

    #[test]
    fn unknown_setting_names_the_key_and_line() {
        let e = err("transforms = [\"compress\"]\n[route.compress]\nlevel = 3\n");
        assert!(e.starts_with("t.toml:9:"), "{e}");
        assert!(e.contains("route[0].compress"), "{e}");
        assert!(e.contains("level"), "{e}");
    }

    #[test]
    fn unknown_coding_is_refused_naming_the_key() {
        let e = err("transforms = [\"compress\"]\n[route.compress]\ncodings = [\"lzma\"]\n");
        assert!(e.starts_with("t.toml:9:"), "{e}");
        assert!(e.contains("codings"), "{e}");
    }
}
