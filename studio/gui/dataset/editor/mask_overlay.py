"""The loss mask over the Dataset page's preview: what dataset.masks leaves out of the loss (black in a mask
file, transparent in the image's alpha) is tinted red, so a person sees what trains before training."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage, QImageReader, QPainter, QPixmap

from studio.core.config.schema import TrainConfig
from studio.core.dataset.mask_checks import mask_files

TINT = QColor(230, 40, 40)
OPACITY = 0.55


# The mask folder's listing as last read, with the folder's modification time then (a file added, removed or
# renamed changes it): stepping through thousands of images lists the folder once, not at every image.
_listing: dict[Path, tuple[int, dict[str, Path]]] = {}


def mask_file(folder: Path, image: Path) -> Path | None:
    """The mask the trainer takes for `image` in `folder` (its rule: any image extension, in any case, such as
    cat.PNG for cat.jpg), or None."""
    try:
        stamp = folder.stat().st_mtime_ns
        listed = _listing.get(folder)
        if listed is None or listed[0] != stamp:
            listed = (stamp, mask_files(folder))
            _listing.clear()
            _listing[folder] = listed
    except OSError:
        return None
    return listed[1].get(image.stem)


def mask_image(config: TrainConfig | None, image: Path, root: Path | None) -> QImage | None:
    """The image's loss mask as 8-bit grey (white trains), or None when dataset.masks gives it none."""
    if config is None or config.dataset.masks == "none":
        return None
    if config.dataset.masks == "alpha":
        reader = QImageReader(str(image))
        reader.setAutoTransform(True)
        read = reader.read()
        if read.isNull() or not read.hasAlphaChannel():
            return None
        return _alpha_as_grey(read)
    folder = Path(config.dataset.mask_folder or "")
    if not folder.is_absolute() and root is not None:
        folder = root / folder
    path = mask_file(folder, image)
    if path is None:
        return None
    reader = QImageReader(str(path))
    reader.setAutoTransform(True)
    read = reader.read()
    return None if read.isNull() else read.convertToFormat(QImage.Format.Format_Grayscale8)


def _alpha_as_grey(image: QImage) -> QImage:
    """The alpha channel of `image` as an 8-bit grey picture (opaque is white)."""
    argb = image.convertToFormat(QImage.Format.Format_ARGB32)
    grey = QImage(argb.size(), QImage.Format.Format_Grayscale8)
    grey.fill(0)
    painter = QPainter(grey)
    white = QImage(argb.size(), QImage.Format.Format_ARGB32)
    white.fill(QColor(255, 255, 255))
    white.setAlphaChannel(argb.convertToFormat(QImage.Format.Format_Alpha8))
    painter.drawImage(0, 0, white)
    painter.end()
    return grey


def with_mask(pixmap: QPixmap, mask: QImage | None) -> QPixmap:
    """`pixmap` with the masked-out part tinted (unchanged without a mask)."""
    return pixmap if mask is None else QPixmap.fromImage(tinted(pixmap.toImage(), mask))


def tinted(image: QImage, mask: QImage | None) -> QImage:
    """`image` with the masked-out part tinted (unchanged without a mask); safe off the GUI thread, unlike a
    pixmap, so the preview is made where it is decoded."""
    if mask is None:
        return image
    scaled = mask.scaled(image.size(), Qt.AspectRatioMode.IgnoreAspectRatio,
                         Qt.TransformationMode.SmoothTransformation)
    hidden = scaled.copy()
    hidden.invertPixels()  # black in the mask (ignored) becomes the tint's full strength
    tint = QImage(image.size(), QImage.Format.Format_ARGB32)
    tint.fill(TINT)
    tint.setAlphaChannel(hidden)  # a grey image: its intensity is the alpha
    out = image.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)
    painter = QPainter(out)
    painter.setOpacity(OPACITY)
    painter.drawImage(0, 0, tint)
    painter.end()
    return out
