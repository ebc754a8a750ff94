; TypeScript's own, after ecma.scm

; Definitions
(function_signature
  name: (identifier) @name.definition.function) @definition.function

(class_declaration
  name: (type_identifier) @name.definition.class) @definition.class

(abstract_class_declaration
  name: (type_identifier) @name.definition.class) @definition.class

(interface_declaration
  name: (type_identifier) @name.definition.interface) @definition.interface

(type_alias_declaration
  name: (type_identifier) @name.definition.type) @definition.type

(enum_declaration
  name: (identifier) @name.definition.enum) @definition.enum

(internal_module
  name: (identifier) @name.definition.module) @definition.module

(method_signature
  name: (property_identifier) @name.definition.method) @definition.method

(abstract_method_signature
  name: (property_identifier) @name.definition.method) @definition.method

(public_field_definition
  name: [(property_identifier) (private_property_identifier)] @name.definition.field) @definition.field

; References
(extends_clause
  value: (identifier) @name.reference.class)

(type_identifier) @name.reference.type
