//! Text for PNG plots: a bitmap backend that draws its labels with `ab_glyph`
//! from a font file found at run time.
//!
//! plotters can only rasterize text with a compiled-in font stack (`ttf`
//! needs fontconfig/freetype; `ab_glyph` needs a registered font even for
//! SVG layout). We build plotters without either, so SVG plots work on any
//! machine (the browser draws `<text>`), and give the PNG backend its own
//! text drawing here. Without a usable font file the PNGs are drawn without
//! text and the report says so.

use std::path::{Path, PathBuf};

use ab_glyph::{point, Font, FontArc, PxScale, ScaleFont};
use plotters::prelude::BitMapBackend;
use plotters::style::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

/// Where the PNG plots get their font from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PngFont {
    /// `CAPRL_REPORT_FONT` if set, else the first of a few common system font files.
    #[default]
    Search,
    /// This TrueType/OpenType file.
    File(PathBuf),
    /// Draw PNGs without any text.
    NoText,
}

/// Font files tried by [`PngFont::Search`], most common Linux locations first.
const SYSTEM_FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// Loads the font `choice` asks for. Returns the font (if any) and, when
/// PNGs will lack text, a sentence saying why.
pub(crate) fn load_font(choice: &PngFont) -> (Option<FontArc>, Option<String>) {
    match choice {
        PngFont::NoText => (
            None,
            Some("PNG plots drawn without text (asked for no font)".into()),
        ),
        PngFont::File(path) => match read_font(path) {
            Ok(font) => (Some(font), None),
            Err(why) => (None, Some(format!("PNG plots drawn without text: {why}"))),
        },
        PngFont::Search => {
            let from_env = std::env::var_os("CAPRL_REPORT_FONT").map(PathBuf::from);
            let candidates = from_env
                .into_iter()
                .chain(SYSTEM_FONTS.iter().map(PathBuf::from));
            for path in candidates {
                if let Ok(font) = read_font(&path) {
                    return (Some(font), None);
                }
            }
            (
                None,
                Some(
                    "PNG plots drawn without text: no font file found (install fonts-dejavu-core, \
                     or pass --png-font FILE.ttf / set CAPRL_REPORT_FONT); the HTML report is unaffected"
                        .into(),
                ),
            )
        }
    }
}

fn read_font(path: &Path) -> Result<FontArc, String> {
    let bytes =
        std::fs::read(path).map_err(|e| format!("could not read font {}: {e}", path.display()))?;
    FontArc::try_from_vec(bytes)
        .map_err(|_| format!("{} is not a TrueType/OpenType font", path.display()))
}

/// A [`BitMapBackend`] whose text is drawn with `font` (or skipped without one).
pub(crate) struct TextBitmap<'a> {
    inner: BitMapBackend<'a>,
    font: Option<&'a FontArc>,
}

impl<'a> TextBitmap<'a> {
    pub(crate) fn new(path: &'a Path, size: (u32, u32), font: Option<&'a FontArc>) -> Self {
        Self {
            inner: BitMapBackend::new(path, size),
            font,
        }
    }
}

/// Width, ascent and descent (negative) in pixels of `text` at `size`.
fn measure(font: &FontArc, size: f64, text: &str) -> (f32, f32, f32) {
    let scaled = font.as_scaled(PxScale::from(size as f32));
    let mut width = 0.0;
    let mut prev = None;
    for c in text.chars() {
        let id = scaled.glyph_id(c);
        if let Some(p) = prev {
            width += scaled.kern(p, id);
        }
        width += scaled.h_advance(id);
        prev = Some(id);
    }
    (width, scaled.ascent(), scaled.descent())
}

type BitmapError<'a> = <BitMapBackend<'a> as DrawingBackend>::ErrorType;

impl<'a> DrawingBackend for TextBitmap<'a> {
    type ErrorType = BitmapError<'a>;

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.present()
    }

    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.fill_polygon(vert, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.inner.blit_bitmap(pos, size, src)
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        match self.font {
            Some(font) => {
                let (width, ascent, descent) = measure(font, style.size(), text);
                Ok((width.ceil() as u32, (ascent - descent).ceil() as u32))
            }
            None => {
                let ((x0, y0), (x1, y1)) = style
                    .layout_box(text)
                    .map_err(|e| DrawingErrorKind::FontError(Box::new(e)))?;
                Ok(((x1 - x0).max(0) as u32, (y1 - y0).max(0) as u32))
            }
        }
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        let color = style.color();
        let Some(font) = self.font else {
            return Ok(());
        };
        if color.alpha == 0.0 {
            return Ok(());
        }
        let scale = PxScale::from(style.size() as f32);
        let scaled = font.as_scaled(scale);
        let (width, ascent, descent) = measure(font, style.size(), text);
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0.0,
            HPos::Center => -width / 2.0,
            HPos::Right => -width,
        };
        let baseline = match anchor.v_pos {
            VPos::Top => ascent,
            VPos::Center => (ascent + descent) / 2.0,
            VPos::Bottom => descent,
        };
        let transform = style.transform();
        let mut coverage = Vec::new();
        let mut caret = dx;
        let mut prev = None;
        for c in text.chars() {
            let id = scaled.glyph_id(c);
            if let Some(p) = prev {
                caret += scaled.kern(p, id);
            }
            let glyph = id.with_scale_and_position(scale, point(caret, baseline));
            if let Some(outline) = font.outline_glyph(glyph) {
                let bounds = outline.px_bounds();
                outline.draw(|gx, gy, c| {
                    let x = bounds.min.x as i32 + gx as i32;
                    let y = bounds.min.y as i32 + gy as i32;
                    coverage.push((transform.transform(x, y), c));
                });
            }
            caret += scaled.h_advance(id);
            prev = Some(id);
        }
        for ((x, y), c) in coverage {
            if c > 0.0 {
                let pixel = BackendColor {
                    alpha: color.alpha * f64::from(c.min(1.0)),
                    rgb: color.rgb,
                };
                self.inner.draw_pixel((pos.0 + x, pos.1 + y), pixel)?;
            }
        }
        Ok(())
    }
}
